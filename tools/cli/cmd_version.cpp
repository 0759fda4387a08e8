// `kiln version`: versions of kiln, LLVM and (when found) NVRTC.
#include <fmt/format.h>

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

}  // namespace kiln::cli
