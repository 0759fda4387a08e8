// What each CUDA target is and has: parsing sm_XY[a], the backend's limits, and which matrix
// multiplies, wgmma, tcgen05, TMA and block-scaled multiplies an arch supports, with the
// message for an op it lacks (compiler/cuda/codegen.h).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/cuda/codegen.h"

namespace kiln::cuda {

using ir::OpKind;
using ir::Type;

std::string Target::name() const {
  return fmt::format("sm_{}{}", sm, arch_specific ? "a" : "");
}
std::string Target::compute() const {
  return fmt::format("compute_{}{}", sm, arch_specific ? "a" : "");
}

Result<Target> parse_target(std::string_view text) {
  std::string_view s = text;
  if (s.rfind("sm_", 0) == 0) s.remove_prefix(3);
  Target t;
  if (!s.empty() && s.back() == 'a') {
    t.arch_specific = true;
    s.remove_suffix(1);
  }
  int v = 0;
  bool ok = !s.empty() && s.size() <= 3;
  for (char c : s) {
    if (c < '0' || c > '9') ok = false;
    v = v * 10 + (c - '0');
  }
  if (!ok || v < 50)
    return Error(
        ErrorKind::InvalidArgument,
        fmt::format("'{}' is not a CUDA target; write sm_XY or sm_XYa, like sm_80, sm_89, sm_90a, "
                    "sm_100a or sm_120a (see kiln targets)",
                    text));
  t.sm = v;
  return t;
}

uint32_t max_shared_optin(const Target& arch) {
  if (arch.sm >= 100 && arch.sm < 120) return 227 * 1024;
  if (arch.sm == 90) return 227 * 1024;
  if (arch.sm == 80 || arch.sm == 87) return 163 * 1024;
  return 99 * 1024;
}

backend::Limits limits(const Target& arch) {
  backend::Limits l;
  l.max_units_per_cube = 1024;
  l.max_shared_bytes = 48 * 1024;
  l.max_shared_optin = max_shared_optin(arch);
  l.max_line = 16;
  l.index_bits = 32;
  return l;
}

std::vector<ir::MatrixConfig> matrix_configs(const Target& arch) {
  if (arch.sm < 80) return {};
  std::vector<ir::MatrixConfig> v;
  for (const ir::MatrixConfig& c : ir::matrix_configs())
    if (!ir::is_f8(c.input) || arch.sm >= 89) v.push_back(c);  // f8 mma.sync: sm_89 on
  return v;
}

bool has_wgmma(const Target& arch) {
  return arch.sm == 90 && arch.arch_specific;
}

bool has_tcgen05(const Target& arch) {
  return arch.sm == 100 && arch.arch_specific;
}

bool has_tma(const Target& arch) {
  return arch.sm >= 90;
}

bool has_multicast(const Target& arch) {
  return (arch.sm == 90 || arch.sm == 100) && arch.arch_specific;
}

bool has_mma_scaled(const Target& arch) {
  return arch.sm == 120 && arch.arch_specific;
}

std::string unsupported_fragment(const ir::Op& op, const ir::Kernel& k, const Target& arch) {
  const bool wgmma = op.kind == OpKind::WgmmaDesc || op.kind == OpKind::Wgmma ||
                     op.kind == OpKind::WgmmaFence || op.kind == OpKind::WgmmaCommit ||
                     op.kind == OpKind::WgmmaWait;
  if (wgmma && !has_wgmma(arch))
    return fmt::format(
        "wgmma is an sm_90a instruction; {} has none (ask has_wgmma() at trace "
        "time and take the fragment path, mma(), there)",
        arch.name());
  const bool mbarrier = op.kind == OpKind::MbarInit || op.kind == OpKind::MbarWait;
  if (mbarrier && arch.sm < 80)
    return fmt::format("mbarriers need sm_80 or later; {} has none", arch.name());
  const bool cluster = op.kind == OpKind::ClusterRank || op.kind == OpKind::SyncCluster ||
                       op.kind == OpKind::ClusterLoad || op.kind == OpKind::TmaLoadMulticast;
  if (cluster && !has_tma(arch))
    return fmt::format(
        "clusters (cluster_rank, sync_cluster, cluster_load, TMA multicast) are sm_90 features; "
        "{} has none (ask has_clusters() at trace time and take another path there)",
        arch.name());
  if (op.kind == OpKind::TmaLoadMulticast && !has_multicast(arch))
    return fmt::format(
        "TMA multicast is for sm_90a and sm_100a; {} has none to use (ptxas expects it to run "
        "substantially slower on other targets): ask has_multicast() at trace time and copy each "
        "cube's box with tma_load there",
        arch.name());
  if (cluster) return {};
  const bool tma = op.kind == OpKind::TmaLoad || op.kind == OpKind::TmaStore ||
                   op.kind == OpKind::TmaPrefetch || op.kind == OpKind::TmaStoreWait ||
                   op.kind == OpKind::MbarArriveTx || op.kind == OpKind::Pipeline;
  if (tma && !has_tma(arch))
    return fmt::format(
        "the Tensor Memory Accelerator (TMA) and mbarrier transaction counts need sm_90 or later; "
        "{} has none (ask has_tma() at trace time and copy with loads and stores there)",
        arch.name());
  if (tma) return {};
  const bool cp_async = op.kind == OpKind::AsyncCopy || op.kind == OpKind::AsyncCommit ||
                        op.kind == OpKind::AsyncWait;
  if (cp_async && arch.sm < 80)
    return fmt::format(
        "cp.async needs sm_80 or later; {} has none (ask has_cp_async() at trace "
        "time and copy with loads and stores there)",
        arch.name());
  if (cp_async) return {};
  if ((ir::is_cube_op(op.kind) || op.kind == OpKind::TmemRead) && !mbarrier && !has_tcgen05(arch))
    return fmt::format(
        "tensor memory and tcgen05 are sm_100a instructions; {} has none (ask has_tcgen05() at "
        "trace time and take another path there)",
        arch.name());
  if (op.kind == OpKind::FragMmaScaled && !has_mma_scaled(arch))
    return fmt::format(
        "block-scaled mma (kind::mxf8f6f4) is an sm_120a instruction; {} has none "
        "(ask has_mma_scaled() at trace time)",
        arch.name());
  if (op.kind == OpKind::Tcgen05Desc && !has_tcgen05(arch))
    return fmt::format(
        "tcgen05.desc describes operands of tcgen05.mma, which {} lacks (sm_100a "
        "only)",
        arch.name());
  if (op.kind != OpKind::AllocFrag) return {};
  const Type& t = k.type_of(op.result);
  if (ir::is_f8(t.elem) && t.use != ir::FragUse::Acc && arch.sm < 89)
    return fmt::format(
        "{} needs mma.sync for {} (sm_89 and later); {} multiplies no 8-bit floats (ask "
        "has_mma<T>(m, n, k) at trace time and convert the inputs to f16 or bf16 there)",
        ir::type_name(t), ir::elem_name(t.elem), arch.name());
  if (arch.sm >= 80) return {};
  return fmt::format(
      "{} needs mma.sync for {} (sm_80 and later); {} has no matrix multiplies "
      "kiln uses",
      ir::type_name(t), ir::elem_name(t.elem), arch.name());
}

}  // namespace kiln::cuda
