// `kiln version`: versions of kiln, LLVM and (when found) NVRTC.
#include <fmt/format.h>

#include "compiler/cpu/backend.h"
#include "compiler/cpu/llvm_info.h"
#include "compiler/cuda/nvrtc.h"
#include "tools/cli/commands.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::cli {

Command add_version_command(CLI::App& app) {
  auto* sub = app.add_subcommand("version", "Print the versions of kiln, LLVM and NVRTC");
  return {sub, []() -> int {
            fmt::print("kiln  {}\n", KILN_VERSION);
            fmt::print("LLVM  {}\n", cpu::llvm_version());
            auto nv = cuda::nvrtc();
            if (nv.ok())
              fmt::print("NVRTC {}.{} ({})\n", (*nv)->major, (*nv)->minor, (*nv)->path);
            else
              fmt::print("NVRTC not available: {}\n",
                         nv.error().message.substr(0, nv.error().message.find('\n')));
            return 0;
          }};
}

Command add_targets_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "targets", "List the targets kiln compiles for: the CPU, and the GPUs NVRTC supports");
  return {
      sub, []() -> int {
        auto host = cpu::host_target();
        fmt::print("cpu      {}; other x86-64 CPUs for inspection with --cpu NAME\n",
                   host ? host->describe() : host.error().message);
        auto nv = cuda::nvrtc();
        if (!nv) {
          fmt::print("cuda     not available: {}\n",
                     nv.error().message.substr(0, nv.error().message.find('\n')));
          return 0;
        }
        auto targets = cuda::supported_targets();
        if (!targets) {
          print_error(targets.error());
          return 1;
        }
        std::string list;
        for (const std::string& t : *targets) list += (list.empty() ? "" : " ") + t;
        fmt::print("cuda     NVRTC {}.{} ({}):\n         {}\n", (*nv)->major, (*nv)->minor,
                   (*nv)->path, list);
        fmt::print(
            "         (the sm_XYa targets enable arch-specific features; kiln's tests compile for "
            "sm_80 sm_89 sm_90a sm_100a sm_120a)\n");
        return 0;
      }};
}

}  // namespace kiln::cli
