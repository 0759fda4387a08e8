// The matrix-product kernels of kiln::lib::matmul (matmul.h) for the CPU: the operands are
// packed into f32 panels by two kernels, then a register-blocked kernel multiplies them.
//
// Layout (BLIS's, with the roles of A and B as the SIMD lanes want them):
// - matmul_pack_a: op(A) as slivers of `mr` rows, sliver s holding element (row s mr + r, k) at
//   (s K + k) mr + r, rows past M zero. One batch item after another; a cube packs a chunk of
//   an item's elements.
// - matmul_pack_b: op(B) as slivers of `nr` columns, element (k, column t nr + j) at
//   (t K + k) nr + j, columns past N zero.
// - matmul_cpu: a cube computes a block of C of mc rows and nb columns, its units one SIMD
//   vector of columns each (cube_dim = lanes). For each chunk of kc along K, for each sliver of
//   A in the block (its mr x kc numbers stay in L1), for each sliver of B (kc x nr, from L2):
//   mr x `vectors` accumulators in registers, and per k `vectors` loads of B and mr broadcasts
//   of A into mr x vectors FMAs. Between chunks the block's sums wait in shared memory (an f32
//   tile in L2); after the last chunk they are scaled, added to beta C and the bias, passed
//   through the epilogue and rounded to C's type once.
#include "kernels/lib/matmul.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/lib/matmul_parts.h"
#include "kernels/run.h"
#include "runtime/autotune.h"

using namespace kiln::dsl;
using kiln::lib::Epilogue;

using namespace kiln::lib::matmul_parts;

// Batch item z of t ([B0, B1, B2, R, C]) into f32 slivers of `width` along dimension `cut` (3:
// rows, 4: columns), the other one (K) running inside each: element (sliver s, k, lane l) at
// (s K + k) width + l, lanes past the cut dimension zero. A step is one k of one sliver (width
// floats); cube (x, 0, z) packs steps x chunk .. (x + 1) chunk - 1 of the item (many small
// slivers to a cube: a batch of small products is not a cube per sliver), unit l lane l of
// each (the units past width idle), walking the steps in order: the sliver and k of each step
// follow from the last one's by a comparison, the one division is the cube's first step's.
// So the stores are consecutive, and the loads are too where the cut dimension is (B
// row-major, A column-major); else they are a gather.
template <class T>
void pack_slivers(const Tensor<const T>& t, Tensor<f32>& out, int width, int chunk, int cut) {
  const auto w = static_cast<uint32_t>(width);
  const int along = 7 - cut;  // the other of dimensions 3 and 4
  u32 cut_size = t.shape(cut), k = t.shape(along);
  u32 z = cube_pos_z(), l = unit_pos();
  u32 steps = (cut_size + (w - 1u)) / w * k;
  u32 base = z * steps * w + l, from = item_offset(t, z);
  u32 cs = t.stride(cut), ks = t.stride(along);
  u32 first = cube_pos_x() * static_cast<uint32_t>(chunk);
  u32 end = min(steps, first + static_cast<uint32_t>(chunk));
  if_(first >= end, [&] { return_(); });
  // The step's sliver and k: the same for every unit (uniform), so that the lanes' index is
  // visibly consecutive.
  Var<uint32_t> s = first / max(k, 1u), kk = first % max(k, 1u);
  Val<bool> lane = l < w;
  for_range(first, end, 1u, [&](u32 step) {
    u32 at = Val<uint32_t>(s) * w + l;
    Var<f32> v = 0.0f;
    if_(lane && at < cut_size,
        [&] { v = cast<float>(Val<host_of_t<T>>(t[from + at * cs + Val<uint32_t>(kk) * ks])); });
    if_(lane, [&] { out[base + step * w] = Val<float>(v); });
    kk += 1u;
    if_(kk == k, [&] {
      kk = 0u;
      s += 1u;
    });
  });
}

// The cube of a packing kernel: its width rounded up to whole vectors of 16 lanes.
uint32_t pack_cube(int64_t width) {
  return static_cast<uint32_t>((width + 15) / 16 * 16);
}

// op(A) (a: [B0, B1, B2, M, K] as the host's view gives it) into slivers of mr rows (the reads
// are a gather unless A is column-major).
template <class T>
void matmul_pack_a(Tensor<const T> a, Tensor<f32> ap, int mr, int chunk) {
  pack_slivers(a, ap, mr, chunk, 3);
}
KILN_KERNEL_GENERIC(matmul_pack_a, "a: rank=5, ap, mr = 12 in 1..32, chunk = 1024 in 1..1048576",
                    f32, f16, bf16, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {pack_cube(c.integer("mr")), 1, 1};
    })
    .describe("kiln::lib::matmul: A into f32 slivers of mr rows (CPU)");

// op(B) (b: [B0, B1, B2, K, N]) into slivers of nr columns: consecutive units read consecutive
// columns (nr is a multiple of the vector).
template <class T>
void matmul_pack_b(Tensor<const T> b, Tensor<f32> bp, int nr, int chunk) {
  pack_slivers(b, bp, nr, chunk, 4);
}
KILN_KERNEL_GENERIC(matmul_pack_b, "b: rank=5, bp, nr = 32 in 1..256, chunk = 512 in 1..1048576",
                    f32, f16, bf16, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {pack_cube(c.integer("nr")), 1, 1};
    })
    .describe("kiln::lib::matmul: B into f32 slivers of nr columns (CPU)");

// C (c: [B0, B1, B2, M, N]) = alpha A B + beta C (+ bias) through the epilogue, from the packed
// operands; a's and b's batch shapes broadcast to c's. Cube (x, y, z) computes the block of mc
// rows from y mc and nb columns from x nb of batch item z; its `lanes` units hold a vector of
// columns each (lanes is the CPU's vector width, so a cube is one vector). The register blocking
// (mr, vectors) is comptime; the cache blocking (mc, nb, kc) is not, so that the autotuner's
// candidates share one compiled kernel: mc a multiple of mr, nb of vectors * lanes, and mc nb at
// most `tile`, the floats of shared memory the block's sums may take.
template <class TC>
void matmul_cpu(Tensor<const f32> ap, Tensor<const f32> bp, Tensor<TC> c, Tensor<const f32> bias,
                u32 k, u32 a0, u32 a1, u32 a2, u32 b0, u32 b1, u32 b2, f32 alpha, f32 beta, u32 mc,
                u32 nb, u32 kc, int mr, int vectors, int lanes, int tile, Epilogue epilogue,
                bool has_bias) {
  const auto umr = static_cast<uint32_t>(mr), ulanes = static_cast<uint32_t>(lanes),
             unr = static_cast<uint32_t>(vectors * lanes);
  assert_(mc % umr == 0u && nb % unr == 0u && mc * nb <= static_cast<uint32_t>(tile) && kc > 0u,
          "mc must be a multiple of mr, nb of vectors * lanes, mc * nb at most tile, kc above 0");
  // The block's sums between chunks of K.
  auto tile_sums = shared_array<f32>(static_cast<uint32_t>(tile));
  const BatchIndex item = batch_index(c, cube_pos_z());
  u32 za = broadcast_item(item, a0, a1, a2), zb = broadcast_item(item, b0, b1, b2);
  u32 c_item = broadcast_offset(item, c);
  u32 slivers_n = (c.shape(4) + (unr - 1u)) / unr, col0 = cube_pos_x() * nb, unit = unit_pos();
  cpu_gemm_blocks(
      ap, c, bias, k, za, c_item, alpha, beta, mc, nb, kc, mr, vectors, lanes, tile_sums, epilogue,
      has_bias,
      [](const Val<uint32_t>&, const Val<uint32_t>&, const Val<uint32_t>&, const Val<uint32_t>&) {},
      [&](const Val<uint32_t>& jr, const Val<uint32_t>& pc) {
        u32 bbase = ((zb * slivers_n + (col0 + jr) / unr) * k + pc) * unr + unit;
        return [&, bbase](const Val<uint32_t>& kk, uint32_t q) -> Val<float> {
          return bp[bbase + kk * unr + q * ulanes];
        };
      });
}
KILN_KERNEL_GENERIC(matmul_cpu,
                    "ap, bp, c: rank=5, bias, k, a0, a1, a2, b0, b1, b2, alpha, beta, "
                    "mc, nb, kc, mr = 12 in 1..32, vectors = 2 in 1..4, lanes = 16 in 1..64, "
                    "tile = 131072 in 1..16777216, "
                    "epilogue = None, has_bias = false",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe("kiln::lib::matmul: C = alpha A B + beta C from packed panels (CPU)");

namespace kiln::lib {

namespace {

using ir::ElemType;

using Problem = detail::MatmulProblem;

Error bad(const std::string& what) {
  return detail::matmul_error(what);
}

Result<Tensor> rank5(const Tensor& t, bool transpose) {
  return detail::matmul_rank5(t, transpose);
}

// The CPU kernels' blocking: the micro-kernel's shape from the vector registers, the blocks
// from the caches (an mr x kc sliver of A stays in L1 while kc x nb of B streams from L2).
struct CpuConfig {
  int mr = 12, vectors = 2, lanes = 16;  // comptime: one compiled kernel per choice
  int tile = 1 << 17;                    // comptime: floats of shared memory for the sums
  int mc = 96, nb = 512, kc = 256;       // run time: the autotuner's candidates vary these
  int nr() const { return vectors * lanes; }
  std::string text() const { return fmt::format("mc={} nb={} kc={}", mc, nb, kc); }
  detail::CpuBlocking blocking() const { return {mr, vectors, lanes, tile, mc, nb, kc}; }
};

long cache_bytes(int name, long fallback) {
  const long v = ::sysconf(name);
  return v > 0 ? v : fallback;
}

CpuConfig cpu_config(const Runtime& rt, const Problem& p) {
  const DeviceInfo& dev = rt.device();
  CpuConfig c;
  c.lanes = std::max(1, rt.max_lanes(ElemType::F32));
  // 32 vector registers with AVX-512: 24 accumulators; 16 before it: 12.
  c.mr = dev.vector_bits >= 512 ? 12 : 6;
  c.vectors = 2;
  const int nr = c.nr();
  // The block's sums live in the cube's shared memory (on the CPU the worker's arena, elsewhere
  // the 48 KiB a cube gets by default): up to 2^17 floats, in two thirds of it.
  c.tile = 1 << 17;
  while (c.tile > 1024 && static_cast<uint64_t>(c.tile) * 4 > dev.shared_bytes * 2 / 3) c.tile /= 2;
  const long l1 = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
  const long l2 = cache_bytes(_SC_LEVEL2_CACHE_SIZE, 1 << 20);
  // A's sliver in half of L1, B's block in half of L2, the block's sums in a quarter.
  c.kc = static_cast<int>(std::clamp<long>(l1 / 2 / (4 * c.mr) / 64 * 64, 64, 1024));
  c.nb = static_cast<int>(std::max<long>(nr, l2 / 2 / (4 * c.kc) / nr * nr));
  c.mc = static_cast<int>(
      std::max<long>(c.mr, std::min<long>(l2 / 4 / (4 * c.nb), 8 * c.mr) / c.mr * c.mr));
  while (c.mc * c.nb > c.tile) {
    if (c.nb > nr)
      c.nb = std::max(nr, c.nb / 2 / nr * nr);
    else
      c.mc = std::max(c.mr, c.mc / 2 / c.mr * c.mr);
  }
  // Enough blocks for every thread: narrower and then shorter blocks while there are fewer
  // than 4 per thread.
  const int64_t threads = std::max(1, dev.cores);
  auto blocks = [&] { return p.batch * ((p.m + c.mc - 1) / c.mc) * ((p.n + c.nb - 1) / c.nb); };
  while (blocks() < 4 * threads && (c.nb > nr || c.mc > c.mr)) {
    if (c.nb > nr && (c.nb >= 2 * c.mc || c.mc == c.mr))
      c.nb = std::max(nr, c.nb / 2 / nr * nr);
    else
      c.mc = std::max(c.mr, c.mc / 2 / c.mr * c.mr);
  }
  return c;
}

// The heuristic blocking of the shapes' bucket (M, N and the batch rounded up to powers of
// two), so that every shape of a bucket shares it and its tuning.
CpuConfig bucket_config(const Runtime& rt, const Problem& p) {
  Problem rounded = p;
  rounded.m = detail::matmul_bucket(p.m);
  rounded.n = detail::matmul_bucket(p.n);
  rounded.batch = detail::matmul_bucket(p.batch);
  return cpu_config(rt, rounded);
}

// A packing kernel's grid and chunk for `item` elements per batch item in slivers of `width`:
// chunks of about 16384 elements (64 KiB of f32) per cube, whole steps of `width` floats.
struct PackGrid {
  Dim3 grid, cube;
  int chunk = 1;
};
PackGrid pack_grid(int64_t item, int64_t items, int width) {
  const int64_t chunk = std::max<int64_t>(1, 16384 / width), steps = item / width;
  return {Dim3(static_cast<uint32_t>((steps + chunk - 1) / chunk), 1, static_cast<uint32_t>(items)),
          Dim3(pack_cube(width)), static_cast<int>(chunk)};
}

// The first `items` batch items of op(A) (a: [B0, B1, B2, M, K]) into slivers of mr rows
// (`item` floats each); K = 0 packs nothing.
Status pack_a_slivers(Runtime& rt, const Tensor& a, Tensor& ap, int64_t item, int64_t items,
                      int mr) {
  if (item == 0 || items == 0) return {};
  KILN_ASSIGN(const Kernel pack_a, rt.kernel("matmul_pack_a"));
  const PackGrid g = pack_grid(item, items, mr);
  return rt.launch(pack_a, g.grid, g.cube, a.as_read_only(), ap, mr, g.chunk);
}

// The element types of A, B and C, and the options' numbers: what matmul and grouped_matmul
// check alike.
Status check_types(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulOptions& o) {
  const ElemType in = a.dtype();
  if ((in != ElemType::F32 && in != ElemType::F16 && in != ElemType::BF16 && !ir::is_f8(in)) ||
      b.dtype() != in)
    return bad(
        fmt::format("a is {} and b {}; both must hold the same type, f32, f16, bf16, "
                    "f8e4m3 or f8e5m2",
                    a.describe(), b.describe()));
  if (ir::is_f8(in) && c.dtype() != ElemType::F32 && c.dtype() != ElemType::F16 &&
      c.dtype() != ElemType::BF16)
    return bad(
        fmt::format("c is {}; the product of {} inputs is f32, f16 or bf16 (scale it "
                    "into 8 bits with a cast of its own)",
                    c.describe(), ir::elem_name(in)));
  if (!ir::is_f8(in) && c.dtype() != ElemType::F32 && c.dtype() != in)
    return bad(fmt::format("c is {}; the result is f32 or the inputs' type ({})", c.describe(),
                           ir::elem_name(in)));
  if (c.read_only()) return bad("the tensor 'c' is read-only");
  if (o.split_k < 0)
    return bad(
        fmt::format("split_k is {}; 0 (the library decides), 1 (never) or the number of "
                    "parts of K",
                    o.split_k));
  if (!std::isfinite(o.alpha) || !std::isfinite(o.beta))
    return bad(fmt::format("alpha ({}) and beta ({}) must be finite", o.alpha, o.beta));
  if (!std::isfinite(o.scale_a) || !std::isfinite(o.scale_b) ||
      !std::isfinite(o.alpha * o.scale_a * o.scale_b))
    return bad(
        fmt::format("scale_a ({}) and scale_b ({}) must be finite, and so must alpha times "
                    "both ({})",
                    o.scale_a, o.scale_b, o.alpha * o.scale_a * o.scale_b));
  return {};
}

Result<Problem> check(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o) {
  const std::pair<const Tensor*, const char*> all[] = {{&a, "a"}, {&b, "b"}, {&c, "c"}};
  for (const auto& [t, name] : all) {
    if (!t->valid()) return bad(fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->rank() < 2 || t->rank() > 5)
      return bad(
          fmt::format("the tensor '{}' is {}; matrices are rank 2 to 5 (up to three "
                      "batch dimensions before the rows and columns)",
                      name, t->describe()));
    if (t->device() != a.device())
      return bad(fmt::format("the tensor '{}' is on another device than a", name));
  }
  KILN_TRY(check_types(a, b, c, o));
  Problem p;
  KILN_ASSIGN(p.a, rank5(a, o.transpose_a));
  KILN_ASSIGN(p.b, rank5(b, o.transpose_b));
  KILN_ASSIGN(p.c, rank5(c, false));
  p.m = p.a.shape(3);
  p.k = p.a.shape(4);
  p.n = p.b.shape(4);
  auto op = [](const char* name, bool t) { return fmt::format("{}{}", name, t ? "^T" : ""); };
  if (p.b.shape(3) != p.k)
    return bad(
        fmt::format("{} is {} x {} and {} is {} x {}: the columns of the first must be "
                    "the rows of the second",
                    op("a", o.transpose_a), p.m, p.k, op("b", o.transpose_b), p.b.shape(3), p.n));
  if (p.c.shape(3) != p.m || p.c.shape(4) != p.n)
    return bad(fmt::format("c is {}; the product is {} x {}", c.describe(), p.m, p.n));
  if (c.rank() < std::max(a.rank(), b.rank()))
    return bad(fmt::format("c is {}; it has fewer batch dimensions than a ({}) or b ({})",
                           c.describe(), a.describe(), b.describe()));
  for (int d = 0; d < 3; ++d) {
    const int64_t cd = p.c.shape(d);
    for (const auto& [t, name] : {std::pair{&p.a, "a"}, std::pair{&p.b, "b"}})
      if (t->shape(d) != 1 && t->shape(d) != cd)
        return bad(
            fmt::format("batch dimension {} of {} is {} where c's is {}; each of a's "
                        "and b's is 1 (broadcast) or c's",
                        d - 3, name, t->shape(d), cd));
    p.batch *= cd;
    p.batch_a *= p.a.shape(d);
    p.batch_b *= p.b.shape(d);
  }
  if (o.bias && (!o.bias->valid() || o.bias->dtype() != ElemType::F32 || o.bias->rank() != 1 ||
                 o.bias->shape(0) != p.n || o.bias->device() != a.device()))
    return bad(fmt::format("the bias is {}; it must be f32[{}] (one per column) on a's device",
                           o.bias->valid() ? o.bias->describe() : "empty", p.n));
  constexpr int64_t kMax = int64_t{1} << 32;
  for (const auto& [t, name] : all)
    if (detail::reach(*t) >= kMax)
      return bad(
          fmt::format("the tensor '{}' ({}) spans 2^32 elements or more; the kernels "
                      "index at most 2^32 - 1 (split the product)",
                      name, t->describe()));
  if (p.batch > 65535)
    return bad(fmt::format("c has {} batch items; at most 65535 per call", p.batch));
  return p;
}

// The product on the CPU with `cfg`: both operands packed (A by `pack_a` when given), then the
// blocks.
Status run_cpu(Runtime& rt, const Problem& p, const MatmulOptions& o, const CpuConfig& cfg,
               const detail::PackRows* custom_a = nullptr,
               const detail::PackRows* custom_b = nullptr) {
  const int64_t slivers_m = (p.m + cfg.mr - 1) / cfg.mr,
                slivers_n = (p.n + cfg.nr() - 1) / cfg.nr();
  const int64_t ap_size = p.batch_a * slivers_m * cfg.mr * p.k,
                bp_size = p.batch_b * slivers_n * cfg.nr() * p.k;
  constexpr int64_t kMax = int64_t{1} << 32;
  if (ap_size >= kMax || bp_size >= kMax)
    return bad(
        fmt::format("A and B padded to whole slivers hold {} and {} elements; the "
                    "kernels index at most 2^32 - 1 (split the product)",
                    ap_size, bp_size));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  KILN_ASSIGN(Tensor ap, rt.empty(ElemType::F32, {std::max<int64_t>(ap_size, 1)}));
  KILN_ASSIGN(Tensor bp, rt.empty(ElemType::F32, {std::max<int64_t>(bp_size, 1)}));
  if (p.k > 0) {
    KILN_ASSIGN(const Kernel pack_b, rt.kernel("matmul_pack_b"));
    const int64_t item_a = slivers_m * cfg.mr * p.k, item_b = slivers_n * cfg.nr() * p.k;
    if (custom_a)
      KILN_TRY((*custom_a)(ap, cfg.mr));
    else
      KILN_TRY(pack_a_slivers(rt, p.a, ap, item_a, p.batch_a, cfg.mr));
    if (custom_b)
      KILN_TRY((*custom_b)(bp, cfg.nr()));
    else if (item_b > 0 && p.batch_b > 0) {
      const PackGrid g = pack_grid(item_b, p.batch_b, cfg.nr());
      KILN_TRY(rt.launch(pack_b, g.grid, g.cube, p.b.as_read_only(), bp, cfg.nr(), g.chunk));
    }
  }
  Tensor bias;
  if (o.bias) {
    bias = o.bias->as_read_only();
  } else {
    KILN_ASSIGN(bias, rt.empty(ElemType::F32, {1}));
  }
  KILN_ASSIGN(const Kernel gemm, rt.kernel("matmul_cpu"));
  const Dim3 cubes(u((p.n + cfg.nb - 1) / cfg.nb), u((p.m + cfg.mc - 1) / cfg.mc), u(p.batch));
  Tensor c = p.c;
  return rt.launch(gemm, cubes, Dim3(u(cfg.lanes)), ap.as_read_only(), bp.as_read_only(), c, bias,
                   u(p.k), u(p.a.shape(0)), u(p.a.shape(1)), u(p.a.shape(2)), u(p.b.shape(0)),
                   u(p.b.shape(1)), u(p.b.shape(2)), o.alpha, o.beta, u(cfg.mc), u(cfg.nb),
                   u(cfg.kc), cfg.mr, cfg.vectors, cfg.lanes, cfg.tile, o.epilogue,
                   o.bias != nullptr);
}

// Blockings around the heuristic one (first): fast mode measures the first four.
std::vector<CpuConfig> cpu_candidates(const CpuConfig& base) {
  const int nr = base.nr();
  std::vector<CpuConfig> out;
  auto add = [&](double fm, double fn, double fk) {
    CpuConfig c = base;
    c.mc = std::max(c.mr, static_cast<int>(base.mc * fm) / c.mr * c.mr);
    c.nb = std::max(nr, static_cast<int>(base.nb * fn) / nr * nr);
    c.kc = std::max(16, static_cast<int>(base.kc * fk) / 16 * 16);
    if (c.mc * c.nb > c.tile) return;
    for (const CpuConfig& o : out)
      if (o.mc == c.mc && o.nb == c.nb && o.kc == c.kc) return;
    out.push_back(c);
  };
  add(1, 1, 1);
  add(1, 0.5, 1);
  add(0.5, 1, 1);
  add(0.5, 0.5, 1);
  add(2, 0.5, 1);
  add(1, 1, 0.75);
  add(1, 0.5, 1.5);
  add(0.5, 2, 1);
  add(1, 0.25, 1);
  add(0.5, 0.25, 0.75);
  return out;
}

int64_t bucket(int64_t v) {
  return detail::matmul_bucket(v);
}

// What the blocking's speed depends on besides the device: the types and the sizes, each
// rounded up to a power of two (the bucket's candidates follow from these alone).
std::string tune_key(const Problem& p, ElemType out) {
  return fmt::format("{}->{} m<={} n<={} k<={} batch<={}", ir::elem_name(p.a.dtype()),
                     ir::elem_name(out), bucket(p.m), bucket(p.n), bucket(p.k), bucket(p.batch));
}

}  // namespace

namespace detail {

Error matmul_error(const std::string& what) {
  return Error(ErrorKind::InvalidArgument, fmt::format("kiln::lib::matmul: {}", what));
}

Result<Tensor> matmul_rank5(const Tensor& t, bool transpose) {
  std::vector<int64_t> shape(5, 1), strides(5, 0);
  const int r = t.rank();
  for (int d = 0; d < r; ++d) {
    shape[static_cast<size_t>(5 - r + d)] = t.shape(d);
    strides[static_cast<size_t>(5 - r + d)] = t.stride(d);
  }
  if (transpose) {
    std::swap(shape[3], shape[4]);
    std::swap(strides[3], strides[4]);
  }
  return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides, t.offset());
}

namespace {

// A product on the CPU with the heuristic blocking, one operand packed by the caller.
Status run_cpu_packed(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                      const PackRows* pack_a, const PackRows* pack_b, std::string* config) {
  const CpuConfig cfg = bucket_config(rt, p);
  if (config) *config = cfg.blocking().text();
  return run_cpu(rt, p, o, cfg, pack_a, pack_b);
}

}  // namespace

std::string CpuBlocking::text() const {
  return fmt::format("{}x{} register blocks ({} lanes), mc={} nb={} kc={}", mr, vectors * lanes,
                     lanes, mc, nb, kc);
}

CpuBlocking matmul_cpu_blocking(const Runtime& rt, const MatmulProblem& p) {
  return bucket_config(rt, p).blocking();
}

Result<Tensor> matmul_cpu_pack_a(Runtime& rt, const MatmulProblem& p, const CpuBlocking& b) {
  const int64_t item = (p.m + b.mr - 1) / b.mr * b.mr * p.k;
  if (item >= int64_t{1} << 32)
    return matmul_error(
        fmt::format("A padded to whole slivers holds {} elements; the kernels index at "
                    "most 2^32 - 1",
                    item));
  KILN_ASSIGN(Tensor ap, rt.empty(ElemType::F32, {std::max<int64_t>(item, 1)}));
  KILN_TRY(pack_a_slivers(rt, p.a, ap, item, 1, b.mr));
  return ap;
}

Status matmul_cpu_packed_a(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                           const PackRows& pack_a, std::string* config) {
  return run_cpu_packed(rt, p, o, &pack_a, nullptr, config);
}

Status matmul_cpu_packed_b(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                           const PackRows& pack_b, std::string* config) {
  return run_cpu_packed(rt, p, o, nullptr, &pack_b, config);
}

Result<Epilogue> run_epilogue(const char* op, double value) {
  if (value != 0 && value != 1 && value != 2 && value != 3)
    return Error(
        ErrorKind::InvalidArgument,
        fmt::format("{}: --set epilogue={}: 0 (none), 1 (ReLU), 2 (GELU) or 3 (SiLU)", op, value));
  return static_cast<Epilogue>(static_cast<int>(value));
}

double reference_activation(double v, Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::Relu:
      return std::max(v, 0.0);
    case Epilogue::Gelu:
      return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case Epilogue::Silu:
      return v / (1 + std::exp(-v));
    default:
      return v;
  }
}

int64_t matmul_bucket(int64_t v) {
  int64_t b = 1;
  while (b < v) b *= 2;
  return b;
}

size_t matmul_tune(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o, std::string key,
                   const std::vector<std::string>& candidates, size_t fast,
                   const MatmulRunner& run) {
  TuneRequest req;
  req.op = "matmul";
  req.key = std::move(key);
  req.candidates = candidates;
  req.fast = fast;
  // Candidates write C when beta is 0 (the call overwrites it anyway), else a scratch tensor,
  // made only if the tuner measures; without the bias and epilogue, which cost the same in
  // every candidate.
  std::optional<MatmulProblem> trial;
  MatmulOptions plain;
  plain.transpose_a = o.transpose_a;
  plain.transpose_b = o.transpose_b;
  plain.allow_tf32 = o.allow_tf32;
  req.run = [&](size_t i) -> Status {
    if (!trial) {
      trial = p;
      if (o.beta != 0) {
        KILN_ASSIGN(Tensor scratch, rt.empty(p.c.dtype(), p.c.shape()));
        KILN_ASSIGN(trial->c, matmul_rank5(scratch, false));
      }
    }
    KILN_TRY(run(*trial, plain, i));
    return rt.sync();
  };
  return autotune(rt, req).index;
}

}  // namespace detail

Status matmul(Runtime& rt, const Tensor& a, const Tensor& b, Tensor& c,
              const MatmulOptions& options) {
  KILN_ASSIGN(const Problem p, check(a, b, c, options));
  // The per-tensor scales multiply every product: they are part of alpha from here on.
  MatmulOptions o = options;
  o.alpha = options.alpha * options.scale_a * options.scale_b;
  o.scale_a = o.scale_b = 1.0f;
  if (p.m == 0 || p.n == 0 || p.batch == 0) {
    if (o.plan) *o.plan = {"none", "an empty product", "C has no elements"};
    return {};
  }
  if (!rt.device().lane_units) return detail::matmul_on_gpu(rt, p, o);
  // The candidates of the shapes' bucket, so that every shape of a bucket shares its tuning.
  const std::vector<CpuConfig> cands = cpu_candidates(bucket_config(rt, p));
  size_t pick = 0;
  if (p.k > 0 && autotune_mode() != AutotuneMode::Off) {
    std::vector<std::string> texts;
    for (const CpuConfig& cfg : cands) texts.push_back(cfg.text());
    pick = detail::matmul_tune(rt, p, o, tune_key(p, c.dtype()), texts, 4,
                               [&](const Problem& q, const MatmulOptions& qo, size_t i) {
                                 return run_cpu(rt, q, qo, cands[i]);
                               });
  }
  const CpuConfig& cfg = cands[pick];
  if (o.plan)
    *o.plan = {"matmul_cpu", cfg.blocking().text(),
               "a CPU: packed f32 panels and a register-blocked micro-kernel"};
  return run_cpu(rt, p, o, cfg);
}

namespace {

Error grouped_error(const std::string& what) {
  return Error(ErrorKind::InvalidArgument, fmt::format("kiln::lib::grouped_matmul: {}", what));
}

// `t`'s item `i` along its first dimension, one rank less (no copy).
Result<Tensor> item_of(const Tensor& t, int64_t i) {
  std::vector<int64_t> shape(t.shape().begin() + 1, t.shape().end()), strides;
  for (int d = 1; d < t.rank(); ++d) strides.push_back(t.stride(d));
  return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides,
                      t.offset() + i * t.stride(0));
}

// The groups' rows on the CPU: each group a product of its own, from views (the ends read on
// the host, where the CPU's memory is, and checked).
Status grouped_on_cpu(Runtime& rt, const Tensor& a, const Tensor& b, const Tensor& ends, Tensor& c,
                      const MatmulOptions& o) {
  const int64_t count = ends.shape(0), rows = a.shape(0);
  std::vector<int32_t> host(static_cast<size_t>(count));
  KILN_TRY(rt.sync());
  KILN_TRY(ends.download(std::span<int32_t>(host)));
  int64_t start = 0;
  MatmulPlan first;
  bool planned = false;
  for (int64_t g = 0; g < count; ++g) {
    const int64_t end = host[static_cast<size_t>(g)];
    if (end < start || end > rows)
      return grouped_error(fmt::format(
          "offsets[{}] is {}: the groups' ends must not decrease and lie in 0 .. {} (a's "
          "rows){}",
          g, end, rows,
          g == 0 ? std::string()
                 : fmt::format("; offsets[{}] is {}", g - 1, host[static_cast<size_t>(g - 1)])));
    if (end > start) {
      KILN_ASSIGN(const Tensor ag, a.slice(0, start, end));
      KILN_ASSIGN(Tensor cg, c.slice(0, start, end));
      KILN_ASSIGN(const Tensor bg, item_of(b, g));
      MatmulOptions og = o;
      Tensor bias;
      if (o.bias && o.bias->rank() == 2) {
        KILN_ASSIGN(bias, item_of(*o.bias, g));
        og.bias = &bias;
      }
      og.plan = planned ? nullptr : &first;
      KILN_TRY(matmul(rt, ag, bg, cg, og));
      planned = true;
    }
    start = end;
  }
  if (o.plan)
    *o.plan = {planned ? first.kernel : "none",
               fmt::format("{}{}one product per group ({} groups)", first.config,
                           planned ? "; " : "", count),
               planned ? first.why : "every group is empty"};
  return {};
}

}  // namespace

Status grouped_matmul(Runtime& rt, const Tensor& a, const Tensor& b, const Tensor& offsets,
                      Tensor& c, const MatmulOptions& options) {
  const std::pair<const Tensor*, const char*> all[] = {
      {&a, "a"}, {&b, "b"}, {&offsets, "offsets"}, {&c, "c"}};
  const int ranks[] = {2, 3, 1, 2};
  const char* forms[] = {"[T, K]", "[G, K, N] ([G, N, K] with transpose_b)", "i32[G]", "[T, N]"};
  for (size_t i = 0; i < 4; ++i) {
    const auto& [t, name] = all[i];
    if (!t->valid())
      return grouped_error(fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->rank() != ranks[i])
      return grouped_error(
          fmt::format("the tensor '{}' is {}; it must be {}", name, t->describe(), forms[i]));
    if (t->device() != a.device())
      return grouped_error(fmt::format("the tensor '{}' is on another device than a", name));
  }
  if (options.transpose_a)
    return grouped_error(
        "transpose_a does not apply: the groups are rows of A (pass a transposed view of A "
        "instead; any strides are read as they are)");
  if (options.split_k > 1)
    return grouped_error(
        fmt::format("split_k is {}; a grouped product is not split", options.split_k));
  if (auto s = check_types(a, b, c, options); !s) {
    std::string m = s.error().message;
    const std::string from = "kiln::lib::matmul: ";
    if (m.rfind(from, 0) == 0) m = m.substr(from.size());
    return grouped_error(m);
  }
  if (offsets.dtype() != ElemType::I32)
    return grouped_error(fmt::format(
        "offsets is {}; it must be i32[G], the groups' cumulative ends (as torch._grouped_mm's "
        "offs)",
        offsets.describe()));
  const int64_t count = b.shape(0), rows = a.shape(0), k = a.shape(1);
  const int64_t bk = b.shape(options.transpose_b ? 2 : 1), n = b.shape(options.transpose_b ? 1 : 2);
  if (offsets.shape(0) != count)
    return grouped_error(
        fmt::format("offsets is {} and b {}: one end per group (b's first dimension)",
                    offsets.describe(), b.describe()));
  if (count == 0) return grouped_error("b has no groups (G = 0)");
  if (bk != k)
    return grouped_error(
        fmt::format("a is {} and b{} is {} x {} per group: the columns of a must "
                    "be the rows of each group's B",
                    a.describe(), options.transpose_b ? "^T" : "", bk, n));
  if (c.shape(0) != rows || c.shape(1) != n)
    return grouped_error(fmt::format("c is {}; the product is {} x {}", c.describe(), rows, n));
  if (options.bias) {
    const Tensor& bias = *options.bias;
    const bool ok = bias.valid() && bias.dtype() == ElemType::F32 && bias.device() == a.device() &&
                    ((bias.rank() == 1 && bias.shape(0) == n) ||
                     (bias.rank() == 2 && bias.shape(0) == count && bias.shape(1) == n));
    if (!ok)
      return grouped_error(fmt::format(
          "the bias is {}; it must be f32[{}] (one per column) or f32[{}, {}] (one row per group) "
          "on a's device",
          bias.valid() ? bias.describe() : "empty", n, count, n));
  }
  constexpr int64_t kMax = int64_t{1} << 32;
  for (const auto& [t, name] : all)
    if (detail::reach(*t) >= kMax)
      return grouped_error(fmt::format(
          "the tensor '{}' ({}) spans 2^32 elements or more; the kernels index at most 2^32 - 1",
          name, t->describe()));
  MatmulOptions o = options;
  o.alpha = options.alpha * options.scale_a * options.scale_b;
  o.scale_a = o.scale_b = 1.0f;
  if (rows == 0 || n == 0) {
    if (o.plan) *o.plan = {"none", "an empty product", "C has no elements"};
    return {};
  }
  if (rt.device().lane_units) return grouped_on_cpu(rt, a, b, offsets, c, o);
  Problem p;
  KILN_ASSIGN(p.a, rank5(a, false));
  KILN_ASSIGN(p.b, rank5(b, options.transpose_b));
  KILN_ASSIGN(p.c, rank5(c, false));
  p.m = rows;
  p.n = n;
  p.k = k;
  return detail::grouped_matmul_on_gpu(rt, p, offsets, o);
}

}  // namespace kiln::lib

// `kiln run matmul`: kiln::lib::matmul on random inputs against a double reference.
// --shape a=[BATCH x]MxK --shape b=[BATCH x]KxN (transposed: KxM and NxK), --dtype a=bf16 (b
// follows), --dtype c=bf16 for a result in the inputs' type; --set alpha=, beta=, transpose_a=,
// transpose_b=, use_bias=, epilogue=0 (none), 1 (ReLU), 2 (GELU) or 3 (SiLU), split_k=, scale_a=,
// scale_b=
// (--dtype a=f8e4m3 with --dtype c=bf16, say).
namespace {

using kiln::kernels::RunData;

// The shape of C for the run's a and b: broadcast batch dimensions, then M x N.
std::vector<int64_t> product_shape(const RunData& d) {
  const auto& a = d.shape("a");
  const auto& b = d.shape("b");
  if (a.size() < 2 || b.size() < 2) return {0, 0};  // refused by kiln::lib::matmul
  const bool ta = d.scalar("transpose_a") != 0, tb = d.scalar("transpose_b") != 0;
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> c(rank, 1);
  // Batch dimensions line up from the right; a missing one is 1.
  auto dim = [&](const std::vector<int64_t>& s, size_t i) {
    return i + s.size() >= rank ? s[i + s.size() - rank] : int64_t{1};
  };
  for (size_t i = 0; i + 2 < rank; ++i) c[i] = dim(a, i) == 1 ? dim(b, i) : dim(a, i);
  c[rank - 2] = a[a.size() - (ta ? 1 : 2)];
  c[rank - 1] = b[b.size() - (tb ? 2 : 1)];
  return c;
}

// The element types `kiln run matmul` and `grouped_matmul` take, per tensor (a, b, bias, c): f32,
// f16 and bf16 to f32 or their own type; 8-bit floats to f32, bf16 or f16.
std::vector<std::vector<kiln::ir::ElemType>> product_variants() {
  using kiln::ir::ElemType;
  std::vector<std::vector<ElemType>> v = {
      {ElemType::F32, ElemType::F32, ElemType::F32, ElemType::F32}};
  for (const ElemType t : {ElemType::F16, ElemType::BF16})
    v.push_back({t, t, ElemType::F32, ElemType::F32});
  for (const ElemType t : {ElemType::F16, ElemType::BF16}) v.push_back({t, t, ElemType::F32, t});
  for (const ElemType t : {ElemType::F8E4M3, ElemType::F8E5M2})
    for (const ElemType out : {ElemType::F32, ElemType::BF16, ElemType::F16})
      v.push_back({t, t, ElemType::F32, out});
  return v;
}

// The runs' tolerance for products of K terms: f32 sums of K products are about K units of f32
// rounding of the largest partial sums (the inputs are in [-1, 1]); then the result type's own
// rounding. f32 inputs as tf32 (a GPU's tensor cores with allow_tf32): 2^-11 of each product,
// about sqrt(K) of them adding up.
std::pair<double, double> product_tolerance(const RunData& d, double k) {
  const double sums = 2e-6 * k + 1e-5;
  if (d.scalar("allow_tf32") != 0 && d.dtype("a") == kiln::ir::ElemType::F32)
    return {2e-3, 2e-3 * std::sqrt(k) + sums};
  switch (d.dtype("c")) {
    case kiln::ir::ElemType::F16:
      return {4e-3, 2e-3 + sums};
    case kiln::ir::ElemType::BF16:
      return {3e-2, 1e-2 + sums};
    default:
      return {1e-5, sums};
  }
}

int64_t inner_k(const RunData& d) {
  const auto& a = d.shape("a");
  return a[a.size() - (d.scalar("transpose_a") != 0 ? 2 : 1)];
}

void matmul_reference(RunData& d) {
  const auto cs = product_shape(d);
  const auto& as = d.shape("a");
  const auto& bs = d.shape("b");
  const bool ta = d.scalar("transpose_a") != 0, tb = d.scalar("transpose_b") != 0;
  const size_t rank = cs.size();
  const int64_t m = cs[rank - 2], n = cs[rank - 1], k = inner_k(d);
  const double alpha = d.scalar("alpha") * d.scalar("scale_a") * d.scalar("scale_b"),
               beta = d.scalar("beta");
  const bool use_bias = d.scalar("use_bias") != 0;
  const auto epilogue = static_cast<int>(d.scalar("epilogue"));
  const auto& a = d["a"];
  const auto& b = d["b"];
  const auto& bias = d["bias"];
  auto& c = d["c"];
  int64_t items = 1;
  for (size_t i = 0; i + 2 < rank; ++i) items *= cs[i];
  // The item of an operand of shape `s` that C's item z reads (its dimensions of 1 broadcast).
  auto item_of = [&](const std::vector<int64_t>& s, int64_t z) {
    int64_t item = 0, rest = z, scale = 1;
    for (size_t i = rank - 2; i-- > 0;) {
      const int64_t idx = rest % cs[i];
      rest /= cs[i];
      if (i + s.size() >= rank) {
        const int64_t dim = s[i + s.size() - rank];
        item += (dim == 1 ? 0 : idx) * scale;
        scale *= dim;
      }
    }
    return item;
  };
  for (int64_t z = 0; z < items; ++z) {
    const double* ap = a.data() + item_of(as, z) * m * k;
    const double* bp = b.data() + item_of(bs, z) * k * n;
    double* cp = c.data() + z * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += ap[ta ? l * m + i : i * k + l] * bp[tb ? j * k + l : l * n + j];
        double v = alpha * sum + (beta != 0 ? beta * cp[i * n + j] : 0.0);
        if (use_bias) v += bias[static_cast<size_t>(j)];
        v = kiln::lib::detail::reference_activation(v, static_cast<Epilogue>(epilogue));
        cp[i * n + j] = d.round("c", v);
      }
  }
}

}  // namespace

KILN_RUN(matmul)
    .host({.description = "C = alpha op(A) op(B) + beta C (+ bias, epilogue): kiln::lib::matmul",
           .kernels = {"matmul_pack_a", "matmul_pack_b", "matmul_cpu", "matmul_gpu",
                       "matmul_pack_rows", "matmul_ring", "matmul_sm90", "matmul_sm100",
                       "matmul_split_sum"},
           .tensors = {{"a", true}, {"b", true}, {"bias", true}, {"c", false}},
           .variants = product_variants(),
           .scalars = {{"alpha", kiln::ir::ElemType::F32},
                       {"beta", kiln::ir::ElemType::F32},
                       {"transpose_a", kiln::ir::ElemType::Bool},
                       {"transpose_b", kiln::ir::ElemType::Bool},
                       {"use_bias", kiln::ir::ElemType::Bool},
                       {"allow_tf32", kiln::ir::ElemType::Bool},
                       {"split_k", kiln::ir::ElemType::U32},
                       {"scale_a", kiln::ir::ElemType::F32},
                       {"scale_b", kiln::ir::ElemType::F32},
                       {"epilogue", kiln::ir::ElemType::U32}},
           .call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                      const RunData& d) -> kiln::Status {
             KILN_ASSIGN(const Epilogue e,
                         kiln::lib::detail::run_epilogue("matmul", d.scalar("epilogue")));
             kiln::lib::MatmulOptions o;
             o.alpha = static_cast<float>(d.scalar("alpha"));
             o.beta = static_cast<float>(d.scalar("beta"));
             o.transpose_a = d.scalar("transpose_a") != 0;
             o.transpose_b = d.scalar("transpose_b") != 0;
             o.epilogue = e;
             o.allow_tf32 = d.scalar("allow_tf32") != 0;
             o.split_k = static_cast<int>(d.scalar("split_k"));
             o.scale_a = static_cast<float>(d.scalar("scale_a"));
             o.scale_b = static_cast<float>(d.scalar("scale_b"));
             const kiln::Tensor bias = t.at("bias");
             if (d.scalar("use_bias") != 0) o.bias = &bias;
             kiln::lib::MatmulPlan plan;
             o.plan = &plan;
             KILN_TRY(kiln::lib::matmul(rt, t.at("a"), t.at("b"), t.at("c"), o));
             d.plan = fmt::format("{}: {} ({})", plan.kernel, plan.config, plan.why);
             return kiln::Status{};
           }})
    .shape("a", {384, 256})
    .shape("b", {256, 320})
    .shape("bias", [](const RunData& d) { return std::vector<int64_t>{product_shape(d).back()}; })
    .shape("c", product_shape)
    .scalar("alpha", 1.0)
    .scalar("beta", 0.0)
    .scalar("transpose_a", 0)
    .scalar("transpose_b", 0)
    .scalar("use_bias", 0)
    .scalar("allow_tf32", 0)
    .scalar("split_k", 0)
    .scalar("scale_a", 1.0)
    .scalar("scale_b", 1.0)
    .scalar("epilogue", 0)
    .flops([](const RunData& d) {
      double f = 2.0 * static_cast<double>(inner_k(d));
      for (int64_t x : product_shape(d)) f *= static_cast<double>(x);
      return f;
    })
    .tolerance([](const RunData& d, std::string_view) {
      return product_tolerance(d, static_cast<double>(inner_k(d)));
    })
    .reference(matmul_reference);

// `kiln run grouped_matmul`: kiln::lib::grouped_matmul on random inputs against a double
// reference. --shape a=TxK --shape b=GxKxN (GxNxK with --set transpose_b=1); the groups' rows
// are uneven, one group of every seven empty, and --set tail=R leaves C's last R rows out of
// every group (they must stay as they were); --set group_bias=1 gives each group a bias row.
namespace {

// The groups' cumulative ends for T rows in G groups, the last `tail` rows in none: group g
// takes a share of (5 g + 3) % 7 (so one of every seven groups is empty).
std::vector<int32_t> grouped_ends(int64_t rows, int64_t groups, int64_t tail) {
  const int64_t used = std::clamp<int64_t>(rows - tail, 0, rows);
  int64_t total = 0;
  for (int64_t g = 0; g < groups; ++g) total += (5 * g + 3) % 7;
  std::vector<int32_t> ends;
  int64_t sum = 0;
  for (int64_t g = 0; g < groups; ++g) {
    sum += (5 * g + 3) % 7;
    ends.push_back(static_cast<int32_t>(total == 0 ? used : used * sum / total));
  }
  return ends;
}

std::vector<int64_t> grouped_c_shape(const RunData& d) {
  const auto& a = d.shape("a");
  const auto& b = d.shape("b");
  if (a.size() != 2 || b.size() != 3) return {0, 0};  // refused by grouped_matmul
  return {a[0], b[d.scalar("transpose_b") != 0 ? 1 : 2]};
}

void grouped_reference(RunData& d) {
  const auto& as = d.shape("a");
  const auto& bs = d.shape("b");
  const bool tb = d.scalar("transpose_b") != 0;
  const int64_t rows = as[0], k = as[1], groups = bs[0], n = grouped_c_shape(d)[1];
  const double alpha = d.scalar("alpha") * d.scalar("scale_a") * d.scalar("scale_b"),
               beta = d.scalar("beta");
  const bool use_bias = d.scalar("use_bias") != 0, group_bias = d.scalar("group_bias") != 0;
  const auto epilogue = static_cast<int>(d.scalar("epilogue"));
  const auto& a = d["a"];
  const auto& b = d["b"];
  const auto& bias = d["bias"];
  auto& c = d["c"];
  const auto ends = grouped_ends(rows, groups, static_cast<int64_t>(d.scalar("tail")));
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t end = ends[static_cast<size_t>(g)];
    const double* bp = b.data() + g * k * n;
    for (int64_t i = start; i < end; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += a[static_cast<size_t>(i * k + l)] * bp[tb ? j * k + l : l * n + j];
        double v = alpha * sum + (beta != 0 ? beta * c[static_cast<size_t>(i * n + j)] : 0.0);
        if (use_bias) v += bias[static_cast<size_t>((group_bias ? g * n : 0) + j)];
        v = kiln::lib::detail::reference_activation(v, static_cast<Epilogue>(epilogue));
        c[static_cast<size_t>(i * n + j)] = d.round("c", v);
      }
    start = end;
  }
}

}  // namespace

KILN_RUN(grouped_matmul)
    .host({.description = "C[group rows] = alpha A[group rows] op(B[group]) + beta C: "
                          "kiln::lib::grouped_matmul",
           .kernels = {"matmul_pack_a", "matmul_pack_b", "matmul_cpu", "matmul_gpu",
                       "matmul_pack_rows", "matmul_ring", "matmul_sm90", "matmul_sm100"},
           .tensors = {{"a", true}, {"b", true}, {"bias", true}, {"c", false}},
           .variants = product_variants(),
           .scalars = {{"alpha", kiln::ir::ElemType::F32},
                       {"beta", kiln::ir::ElemType::F32},
                       {"transpose_b", kiln::ir::ElemType::Bool},
                       {"use_bias", kiln::ir::ElemType::Bool},
                       {"group_bias", kiln::ir::ElemType::Bool},
                       {"allow_tf32", kiln::ir::ElemType::Bool},
                       {"scale_a", kiln::ir::ElemType::F32},
                       {"scale_b", kiln::ir::ElemType::F32},
                       {"tail", kiln::ir::ElemType::U32},
                       {"epilogue", kiln::ir::ElemType::U32}},
           .call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                      const RunData& d) -> kiln::Status {
             KILN_ASSIGN(const Epilogue e,
                         kiln::lib::detail::run_epilogue("grouped_matmul", d.scalar("epilogue")));
             const kiln::Tensor& a = t.at("a");
             const kiln::Tensor& b = t.at("b");
             if (a.rank() != 2 || b.rank() != 3)
               return kiln::Error(kiln::ErrorKind::InvalidArgument,
                                  fmt::format("grouped_matmul: a is {} and b {}; --shape a=TxK "
                                              "--shape b=GxKxN (GxNxK with transpose_b)",
                                              a.describe(), b.describe()));
             const auto host =
                 grouped_ends(a.shape(0), b.shape(0), static_cast<int64_t>(d.scalar("tail")));
             KILN_ASSIGN(kiln::Tensor ends,
                         rt.empty(kiln::ir::ElemType::I32, {static_cast<int64_t>(host.size())}));
             KILN_TRY(ends.upload(std::span<const int32_t>(host)));
             kiln::lib::MatmulOptions o;
             o.alpha = static_cast<float>(d.scalar("alpha"));
             o.beta = static_cast<float>(d.scalar("beta"));
             o.transpose_b = d.scalar("transpose_b") != 0;
             o.epilogue = e;
             o.allow_tf32 = d.scalar("allow_tf32") != 0;
             o.scale_a = static_cast<float>(d.scalar("scale_a"));
             o.scale_b = static_cast<float>(d.scalar("scale_b"));
             const kiln::Tensor bias = t.at("bias");
             if (d.scalar("use_bias") != 0) o.bias = &bias;
             kiln::lib::MatmulPlan plan;
             o.plan = &plan;
             KILN_TRY(kiln::lib::grouped_matmul(rt, a, b, ends, t.at("c"), o));
             std::string sizes;
             int32_t before = 0;
             for (const int32_t end : host) {
               sizes += fmt::format("{}{}", sizes.empty() ? "" : " ", end - before);
               before = end;
             }
             d.plan = fmt::format("{}: {} ({}); group rows {}", plan.kernel, plan.config, plan.why,
                                  sizes);
             return kiln::Status{};
           }})
    .shape("a", {300, 128})
    .shape("b", {6, 128, 96})
    .shape("bias",
           [](const RunData& d) {
             const auto c = grouped_c_shape(d);
             if (d.scalar("group_bias") != 0) return std::vector<int64_t>{d.dim("b", 0), c[1]};
             return std::vector<int64_t>{c[1]};
           })
    .shape("c", grouped_c_shape)
    .scalar("alpha", 1.0)
    .scalar("beta", 0.0)
    .scalar("transpose_b", 0)
    .scalar("use_bias", 0)
    .scalar("group_bias", 0)
    .scalar("allow_tf32", 0)
    .scalar("scale_a", 1.0)
    .scalar("scale_b", 1.0)
    .scalar("tail", 0)
    .scalar("epilogue", 0)
    .flops([](const RunData& d) {
      const auto c = grouped_c_shape(d);
      return 2.0 * static_cast<double>(c[0]) * static_cast<double>(c[1]) *
             static_cast<double>(d.shape("a").back());
    })
    .tolerance([](const RunData& d, std::string_view) {
      return product_tolerance(d, static_cast<double>(d.shape("a").back()));
    })
    .reference(grouped_reference);
