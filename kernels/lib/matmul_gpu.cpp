// The GPU kernels of kiln::lib::matmul (matmul.h) and the choice between them. A path is taken
// where the device's compile target has the features it needs (DeviceInfo::features), never by
// the device's name, so a new architecture with those features gets it unchanged:
//
//   path      needs (first match)          kernel          on
//   tcgen05   tcgen05 and TMA              matmul_sm100    sm_100a
//   wgmma     wgmma and TMA                matmul_sm90     sm_90a
//   ring      cp.async                     matmul_ring     sm_80, sm_86, sm_89, sm_90, sm_120a
//   portable  nothing                      matmul_gpu      any GPU; f32 inputs without tf32; K = 0
//
// The tensor-core paths read both operands K-major: A as [items, M, K] and B as [items, N, K]
// (B transposed), K contiguous, rows 16 bytes apart a whole number of times, starting on 16
// bytes, K a multiple of 16 bytes' worth of elements; an operand that is not (a row-major B, a
// transposed A, odd K, batch dimensions that do not collapse) is first copied into that form by
// matmul_pack_rows, in its own type. Every path's epilogue is the same: alpha times the f32
// sum, plus beta C, the bias and the activation, rounded once to C's type, written through any
// strides of C (finish_value, shared with the CPU).
//
// docs/kernels.md "Matmul on GPUs" describes the paths; docs/performance.md estimates each one's
// fraction of peak from its resources (kiln show --emit resources).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/lib/matmul_parts.h"
#include "kernels/run.h"
#include "runtime/autotune.h"

using namespace kiln::lib::matmul_parts;

namespace {

using kiln::lib::detail::InOut;

// Where a cube's sums go: element (row, col) of C's batch item `item` (a flat index) gets the
// epilogue of the sum s when it is inside C's columns and above row `rows` (C's rows, or the end
// of a grouped product's group); the bias from element bias_at + col (a group's row of the
// bias, or 0).
template <class TC>
struct Store {
  const Tensor<TC>& c;
  Val<uint32_t> item, rows, bias_at;
  const Tensor<const f32>& bias;
  Val<float> alpha, beta;
  bool has_bias;
  Epilogue epilogue;
  void operator()(const Val<uint32_t>& row, const Val<uint32_t>& col, const Val<float>& s) const {
    if_(row < rows && col < c.shape(4), [&] {
      u32 idx = item + row * c.stride(3) + col * c.stride(4);
      c[idx] = cast<host_of_t<TC>>(
          finish_value(c, idx, bias_at + col, s, alpha, beta, bias, has_bias, epilogue));
    });
  }
};

// The rows of a grouped product (grouped_matmul: A's and C's rows in groups, group g's rows
// times B's item g) that cube row cube_pos_y() computes, tiles of `tm` rows: its first row, the
// end of its group's rows and the group. `ends` holds the groups' cumulative ends (i32 [G]),
// each clamped into [the end before, total], so that no offsets read or write outside the
// tensors. Tiles run group after group, ceil(rows / tm) each; the grid is sized for the most
// tiles any offsets make (ceil(total / tm) + G); a cube past the last returns at once, or, in a
// kernel with a pipeline (which no unit may leave before it starts: `stay`), gets first = end = 0
// and stores nothing.
struct GroupTile {
  Val<uint32_t> first, end, group;
};
inline GroupTile group_tile(const Tensor<const i32>& ends, uint32_t tm, const Val<uint32_t>& total,
                            bool stay = false) {
  Var<u32> start = 0u, before = 0u, first = 0u, end = 0u, group = 0u;
  u32 t = cube_pos_y();
  for_range(0u, ends.len(), 1u, [&](u32 g) {
    u32 s = start;
    u32 e = min(max(cast<uint32_t>(max(Val<int32_t>(ends[g]), 0)), s), total);
    u32 b = before;
    u32 tiles = (e - s + (tm - 1u)) / tm;
    if_(t >= b && t < b + tiles, [&] {
      first = s + (t - b) * tm;
      end = e;
      group = g;
    });
    before = b + tiles;
    start = e;
  });
  u32 last = end;
  if (!stay) if_(last == 0u, [&] { return_(); });
  return {first, last, group};
}

// A 128-row tile of matmul_sm90 and matmul_sm100: the items of A and B its boxes read (za, zb),
// its first row, C's rows (or its group's end), C's item and the bias's first element.
struct TilePlace {
  Val<uint32_t> za, zb, m0, rows, c_item, bias_at;
};
template <class T, class TC>
TilePlace tma_tile_place(const Tensor<const T>& a, const Tensor<const T>& b, const Tensor<TC>& c,
                         const Tensor<const i32>& groups, const Tensor<const f32>& bias,
                         const Val<uint32_t>& a0, const Val<uint32_t>& a1, const Val<uint32_t>& a2,
                         const Val<uint32_t>& b0, const Val<uint32_t>& b1, const Val<uint32_t>& b2,
                         bool grouped) {
  if (grouped) {
    const GroupTile g = group_tile(groups, 128u, a.shape(1), true);
    return {u32(0u), g.group, g.first,
            g.end,   u32(0u), select(bias.len() > b.shape(1), g.group * b.shape(1), 0u)};
  }
  const BatchIndex item = batch_index(c, cube_pos_z());
  return {broadcast_item(item, a0, a1, a2),
          broadcast_item(item, b0, b1, b2),
          cube_pos_y() * 128u,
          c.shape(3),
          broadcast_offset(item, c),
          u32(0u)};
}

}  // namespace

// ---- operands}  // namespace

// ---- operands for the tensor-core paths ---------------------------------------------------------

// Batch item z of src ([B0, B1, B2, R, C]: op(A) or op(B)) into dst ([items, rows, kp]: rows of
// K contiguous, zeros from K to kp), in the same type: an operand as the tensor-core paths read
// it. `cut` is src's dimension of rows (3: A's M; 4: B's N), the other one K. `k_inner`: src's
// K dimension is the contiguous one, so the reads go along it (else along the rows). Cube (x, y,
// z) moves the 32 x 32 block of rows from 32 y and k from 32 x through shared memory, so that
// its reads and its writes are both consecutive.
template <class T>
void matmul_pack_rows(Tensor<const T> src, Tensor<T> dst, int cut, bool k_inner) {
  using In = host_of_t<T>;
  auto block = shared_array<T>(32u * 33u);
  const int along = 7 - cut;
  u32 rows = src.shape(cut), k = src.shape(along), kp = dst.shape(2);
  u32 z = cube_pos_z();
  u32 from = item_offset(src, z);
  u32 r0 = cube_pos_y() * 32u, k0 = cube_pos_x() * 32u;
  u32 rs = src.stride(cut), ks = src.stride(along);
  for_range(unit_pos(), 1024u, cube_dim(), [&](u32 e) {
    u32 i = e / 32u, j = e % 32u;  // j runs along src's contiguous dimension
    u32 r = k_inner ? i : j, kk = k_inner ? j : i;
    Val<bool> inside = r0 + r < rows && k0 + kk < k;
    u32 idx = from + select(inside, (r0 + r) * rs + (k0 + kk) * ks, 0u);
    block[r * 33u + kk] = select(inside, Val<In>(src[idx]), T(0));
  });
  sync_cube();
  for_range(unit_pos(), 1024u, cube_dim(), [&](u32 e) {
    u32 r = e / 32u, kk = e % 32u;
    if_(r0 + r < rows && k0 + kk < kp,
        [&] { dst[z * dst.stride(0) + (r0 + r) * dst.stride(1) + k0 + kk] = block[r * 33u + kk]; });
  });
}
KILN_KERNEL_GENERIC(matmul_pack_rows, "src: rank=5, dst: rank=3, cut = 3 in 3..4, k_inner = true",
                    f32, f16, bf16, f8e4m3, f8e5m2)
    .cube_dim(256)
    .describe("kiln::lib::matmul on a GPU: an operand into rows of K, for the tensor-core paths");

// ---- portable: any GPU --------------------------------------------------------------------------

// C (c: [B0, B1, B2, M, N]) = alpha op(A) op(B) + beta C (+ bias) through the epilogue, on a GPU:
// a cube computes a tile of planes_m x planes_n planes of frag_m x frag_n. Each step of k
// (k_steps instruction steps) stages the cube's rows of A and columns of B in shared memory,
// converted to the input type and zero outside the matrices, whatever the operands' strides
// (a, b: [B0, B1, B2, rows, columns] views, batch dimensions of 1 broadcast). With `fragments`
// and a target that has the multiply (sm_80 and later, has_mma), each plane multiplies its
// fragments on the tensor cores (f32 inputs as tf32); otherwise each unit computes its elements
// of the tile with FMAs in f32, in the order of k, as the CPU kernel does. The sums go through
// shared memory to the epilogue, which every unit applies to its elements of C. `grouped`: a
// grouped product (group_tile): a is [1, 1, 1, T, K], b [1, 1, G, K, N], c [1, 1, 1, T, N].
template <class P>
void matmul_gpu(Tensor<const typename P::In> a, Tensor<const typename P::In> b,
                Tensor<typename P::Out> c, Tensor<const f32> bias, Tensor<const i32> groups,
                f32 alpha, f32 beta, int frag_m, int frag_n, int planes_m, int planes_n,
                int k_steps, bool fragments, Epilogue epilogue, bool has_bias, bool grouped) {
  using T = typename P::In;
  using In = host_of_t<T>;
  const int ks = mma_k_step<T>() * k_steps;
  const uint32_t tm = static_cast<uint32_t>(planes_m * frag_m),
                 tn = static_cast<uint32_t>(planes_n * frag_n), uks = static_cast<uint32_t>(ks),
                 units = static_cast<uint32_t>(32 * planes_m * planes_n);
  auto as = shared_array<T>(tm * uks);
  auto bs = shared_array<T>(uks * tn);
  auto sums = shared_array<f32>(tm * tn);
  u32 n = c.shape(4), k = a.shape(4);
  u32 ccol = cube_pos_x() * tn;
  // The cube's rows (crow .. below m) and the items of A, B and C they are in.
  auto place = [&]() -> std::array<Val<uint32_t>, 6> {
    if (grouped) {
      const GroupTile g = group_tile(groups, tm, c.shape(3));
      return {g.first, g.end,
              u32(0u), g.group * b.stride(2),
              u32(0u), select(bias.len() > n, g.group * n, 0u)};
    }
    const BatchIndex item = batch_index(c, cube_pos_z());
    return {cube_pos_y() * tm,         c.shape(3),
            broadcast_offset(item, a), broadcast_offset(item, b),
            broadcast_offset(item, c), u32(0u)};
  }();
  u32 crow = place[0], m = place[1], a_item = place[2], b_item = place[3];
  const Store<typename P::Out> out{c, place[4], m, place[5], bias, alpha, beta, has_bias, epilogue};
  // Step k0's tiles into shared memory, zeros outside the matrices.
  auto stage = [&](const Val<uint32_t>& k0) {
    for_range(unit_pos(), tm * uks, units, [&](u32 e) {
      u32 r = e / uks, kk = e % uks;
      Val<bool> inside = crow + r < m && k0 + kk < k;
      u32 idx = a_item + min(crow + r, m - 1u) * a.stride(3) + min(k0 + kk, k - 1u) * a.stride(4);
      as[e] = select(inside, Val<In>(a[idx]), T(0));
    });
    for_range(unit_pos(), uks * tn, units, [&](u32 e) {
      u32 kk = e / tn, j = e % tn;
      Val<bool> inside = k0 + kk < k && ccol + j < n;
      u32 idx = b_item + min(k0 + kk, k - 1u) * b.stride(3) + min(ccol + j, n - 1u) * b.stride(4);
      bs[e] = select(inside, Val<In>(b[idx]), T(0));
    });
  };
  if (fragments && has_mma<T>(frag_m, frag_n, ks)) {
    auto fa = matrix_a<T>(frag_m, frag_n, ks);
    auto fb = matrix_b<T>(frag_m, frag_n, ks);
    auto acc = accumulator<f32>(frag_m, frag_n, ks);
    u32 p = plane_pos();
    u32 prow = p / static_cast<uint32_t>(planes_n) * static_cast<uint32_t>(frag_m),
        pcol = p % static_cast<uint32_t>(planes_n) * static_cast<uint32_t>(frag_n);
    fill(acc, 0.0f);
    for_range(0u, k, uks, [&](u32 k0) {
      stage(k0);
      sync_cube();
      load(fa, as, prow * uks, uks);
      load(fb, bs, pcol, tn);
      mma(acc, fa, fb);
      sync_cube();
    });
    store(sums, prow * tn + pcol, tn, acc);
  } else {
    // Each unit's elements of the tile: unit + i units.
    const uint32_t per_unit = tm * tn / units;
    std::vector<Var<f32>> acc;
    acc.reserve(per_unit);
    for (uint32_t i = 0; i < per_unit; ++i) acc.push_back(Var<f32>(0.0f));
    for_range(0u, k, uks, [&](u32 k0) {
      stage(k0);
      sync_cube();
      for_range(0u, uks, 1u, [&](u32 kk) {
        for (uint32_t i = 0; i < per_unit; ++i) {
          u32 e = unit_pos() + i * units;
          f32 x = cast<float>(Val<In>(as[e / tn * uks + kk]));
          f32 y = cast<float>(Val<In>(bs[kk * tn + e % tn]));
          acc[i] = fma(x, y, Val<float>(acc[i]));
        }
      });
      sync_cube();
    });
    for (uint32_t i = 0; i < per_unit; ++i) sums[unit_pos() + i * units] = acc[i];
  }
  sync_cube();
  for_range(unit_pos(), tm * tn, units, [&](u32 e) { out(crow + e / tn, ccol + e % tn, sums[e]); });
}
KILN_KERNEL_GENERIC(matmul_gpu,
                    "a: rank=5, b: rank=5, c: rank=5, bias, groups, alpha, beta, "
                    "frag_m = 32 in 16..32, frag_n = 32 in 8..32, planes_m = 2 in 1..4, "
                    "planes_n = 2 in 1..4, k_steps = 1 in 1..2, fragments = true, "
                    "epilogue = None, has_bias = false, grouped = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>, InOut<f8e4m3, f32>, InOut<f8e4m3, f16>, InOut<f8e4m3, bf16>,
                    InOut<f8e5m2, f32>, InOut<f8e5m2, f16>, InOut<f8e5m2, bf16>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes_m") * c.integer("planes_n")), 1, 1};
    })
    .describe("kiln::lib::matmul on any GPU: tiles staged in shared memory, mma.sync fragments");

// ---- ring: cp.async feeding mma.sync (sm_80 and later) ------------------------------------------

// C = alpha A B^T + beta C (+ bias) through the epilogue, from K-major operands (a: [items, M, K],
// b: [items, N, K], as matmul_pack_rows leaves them; a0..a2 and b0..b2 their batch shapes, which
// broadcast to C's). A cube of warps_m x warps_n planes owns a tile of C of warps_m frags_m 32
// rows by warps_n frags_n 32 columns; plane (i, j) holds frags_m x frags_n accumulators of
// 32 x 32. The tiles of A and B for kc values of k go through a ring of `stages` stages in
// shared memory, filled by cp.async 16 bytes at a time, up to stages - 1 rounds ahead:
//
//   before:   rounds 0 .. stages - 2 copied into stages 0 .. stages - 2, a group each
//   round r:  wait until round r's group has landed (copy_async_wait(stages - 2)), sync_cube
//             (every unit is also past round r - 1's reads); copy round r + stages - 1 into the
//             stage round r - 1 read; multiply round r out of stage r % stages (ldmatrix)
//
// Rows of a stage are kc + 16 bytes long: the 16 extra bytes put the 8 rows that an ldmatrix
// reads together in different banks. The epilogue goes a fragment at a time through 32 x 33
// floats of shared memory per plane, so its writes to C are along rows. `grouped`: a grouped
// product (group_tile): a is [1, T, K], b [G, N, K], c [1, 1, 1, T, N].
template <class P>
void matmul_ring(Tensor<const typename P::In> a, Tensor<const typename P::In> b,
                 Tensor<typename P::Out> c, Tensor<const f32> bias, Tensor<const i32> groups,
                 u32 a0, u32 a1, u32 a2, u32 b0, u32 b1, u32 b2, f32 alpha, f32 beta, int warps_m,
                 int warps_n, int frags_m, int frags_n, int kc, int stages, Epilogue epilogue,
                 bool has_bias, bool grouped) {
  using T = typename P::In;
  const int ks = mma_k_step<T>();
  if (!has_mma<T>(32, 32, ks) || !has_cp_async() || kc % ks != 0) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("matmul_ring needs mma.sync of 32 x 32 x {} fragments and cp.async (sm_80 "
                    "and later), and kc a multiple of {}; kc is {}",
                    ks, ks, kc));
    return;
  }
  const uint32_t per16 = 16u / sizeof(host_of_t<T>), ukc = static_cast<uint32_t>(kc),
                 ld = ukc + per16, ns = static_cast<uint32_t>(stages);
  const uint32_t pm = static_cast<uint32_t>(frags_m * 32), pn = static_cast<uint32_t>(frags_n * 32);
  const uint32_t tm = static_cast<uint32_t>(warps_m) * pm, tn = static_cast<uint32_t>(warps_n) * pn,
                 units = static_cast<uint32_t>(32 * warps_m * warps_n);
  const uint32_t a_stage = tm * ld, b_stage = tn * ld, chunks = ukc / per16;
  auto as = shared_array<T>(ns * a_stage);
  auto bs = shared_array<T>(ns * b_stage);
  u32 k = a.shape(2), n = b.shape(1);
  auto place = [&]() -> std::array<Val<uint32_t>, 6> {
    if (grouped) {
      const GroupTile g = group_tile(groups, tm, a.shape(1));
      return {g.first, g.end,
              u32(0u), g.group * b.stride(0),
              u32(0u), select(bias.len() > n, g.group * n, 0u)};
    }
    const BatchIndex item = batch_index(c, cube_pos_z());
    return {cube_pos_y() * tm,
            a.shape(1),
            broadcast_item(item, a0, a1, a2) * a.stride(0),
            broadcast_item(item, b0, b1, b2) * b.stride(0),
            broadcast_offset(item, c),
            u32(0u)};
  }();
  u32 m0 = place[0], m = place[1], a_item = place[2], b_item = place[3];
  const Store<typename P::Out> store_c{c,     place[4], m,        place[5], bias,
                                       alpha, beta,     has_bias, epilogue};
  u32 n0 = cube_pos_x() * tn;
  u32 plane = plane_pos();
  u32 wm = plane / static_cast<uint32_t>(warps_n), wn = plane % static_cast<uint32_t>(warps_n);
  u32 rounds = (k + (ukc - 1u)) / ukc;
  // The rows of one operand for round r into stage `stage`: 16-byte chunks, zeros past the
  // matrix (K is a multiple of a chunk, so a chunk is all inside or all outside).
  auto copy_rows = [&](const SharedArray<T>& dst, uint32_t dst_stage, uint32_t rows,
                       const Tensor<const T>& src, const Val<uint32_t>& item_at,
                       const Val<uint32_t>& first, const Val<uint32_t>& extent,
                       const Val<uint32_t>& r, const Val<uint32_t>& stage) {
    u32 k0 = r * ukc;
    for_range(unit_pos(), rows * chunks, units, [&](u32 e) {
      u32 row = e / chunks, at = e % chunks * per16;
      Val<bool> inside = first + row < extent && k0 + at < k;
      u32 from = item_at + select(inside, (first + row) * src.stride(1) + k0 + at, 0u);
      copy_async(dst, stage * dst_stage + row * ld + at, src, from, inside);
    });
  };
  auto copy_round = [&](const Val<uint32_t>& r, const Val<uint32_t>& stage) {
    copy_rows(as, a_stage, tm, a, a_item, m0, m, r, stage);
    copy_rows(bs, b_stage, tn, b, b_item, n0, n, r, stage);
  };
  std::vector<Fragment<T>> fa, fb;
  std::vector<Fragment<f32>> acc;
  for (int i = 0; i < frags_m; ++i) fa.push_back(matrix_a<T>(32, 32, ks));
  for (int j = 0; j < frags_n; ++j) fb.push_back(matrix_b<T>(32, 32, ks));
  for (int i = 0; i < frags_m * frags_n; ++i) {
    acc.push_back(accumulator<f32>(32, 32, ks));
    fill(acc.back(), 0.0f);
  }
  for (uint32_t p = 0; p + 1 < ns; ++p) {
    if_(u32(p) < rounds, [&] { copy_round(Val<uint32_t>(p), Val<uint32_t>(p)); });
    copy_async_commit();  // one group per round, empty or not, so that the waits count rounds
  }
  for_range(0u, rounds, 1u, [&](u32 r) {
    copy_async_wait(stages - 2);
    sync_cube();
    u32 ahead = r + (ns - 1u);
    if_(ahead < rounds, [&] { copy_round(ahead, ahead % ns); });
    copy_async_commit();
    u32 stage = r % ns;
    for (int s = 0; s < kc / ks; ++s) {
      const auto kk = static_cast<uint32_t>(s * ks);
      for (int i = 0; i < frags_m; ++i)
        load(fa[static_cast<size_t>(i)], as,
             stage * a_stage + (wm * pm + static_cast<uint32_t>(i * 32)) * ld + kk, ld);
      for (int j = 0; j < frags_n; ++j)
        load(fb[static_cast<size_t>(j)], bs,
             stage * b_stage + (wn * pn + static_cast<uint32_t>(j * 32)) * ld + kk, ld,
             Layout::Col);
      for (int i = 0; i < frags_m; ++i)
        for (int j = 0; j < frags_n; ++j)
          mma(acc[static_cast<size_t>(i * frags_n + j)], fa[static_cast<size_t>(i)],
              fb[static_cast<size_t>(j)]);
    }
  });
  copy_async_wait(0);  // no copy is in flight when the cube ends
  auto out = shared_array<f32>(static_cast<uint32_t>(warps_m * warps_n) * 32u * 33u);
  for (int i = 0; i < frags_m; ++i)
    for (int j = 0; j < frags_n; ++j) {
      store(out, plane * (32u * 33u), 33u, acc[static_cast<size_t>(i * frags_n + j)]);
      sync_plane();
      u32 row0 = m0 + wm * pm + static_cast<uint32_t>(i * 32),
          col0 = n0 + wn * pn + static_cast<uint32_t>(j * 32);
      for_range(plane_lane(), 1024u, plane_dim(), [&](u32 e) {
        store_c(row0 + e / 32u, col0 + e % 32u, out[plane * (32u * 33u) + e / 32u * 33u + e % 32u]);
      });
      sync_plane();
    }
}
KILN_KERNEL_GENERIC(matmul_ring,
                    "a: rank=3, b: rank=3, c: rank=5, bias, groups, a0, a1, a2, b0, b1, b2, "
                    "alpha, beta, warps_m = 4 in 1..4, warps_n = 2 in 1..4, frags_m = 1 in 1..2, "
                    "frags_n = 2 in 1..4, kc = 32 in 8..128, stages = 3 in 2..5, "
                    "epilogue = None, has_bias = false, grouped = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>, InOut<f8e4m3, f32>, InOut<f8e4m3, f16>, InOut<f8e4m3, bf16>,
                    InOut<f8e5m2, f32>, InOut<f8e5m2, f16>, InOut<f8e5m2, bf16>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("warps_m") * c.integer("warps_n")), 1, 1};
    })
    .describe("kiln::lib::matmul on sm_80 and later: a cp.async ring feeding mma.sync");

// ---- wgmma: TMA, a producer plane and warpgroup multiplies (sm_90a) -----------------------------

// C = alpha A B^T + beta C (+ bias) through the epilogue, from K-major operands (as matmul_ring's).
// A cube of two warpgroups owns a 128 x tile_n tile of C (warpgroup g its rows 64 g .. 64 g + 63).
// A producer warpgroup (pipeline, docs/dsl.md "Warp specialization") copies each round's boxes
// of A (two of 64 rows) and B (tile_n rows), 128 bytes of k each, into a ring of `stages`
// stages through TMA, swizzled as wgmma reads them; it keeps 40 registers per unit and gives the
// rest to the consumers, which take 232 (setmaxnreg), room for the 128 accumulators per unit of
// a 128 x 256 tile. The warpgroups multiply each round as soon as it lands (four wgmma of 32
// bytes of k), keep one round's multiplies in flight (wgmma_wait(1)) and release the stage of the
// round before. The product goes through shared memory to the epilogue one warpgroup's 64 rows
// at a time (rows padded by 4 floats), so that its writes to C are along rows and the staging
// takes half the space. `grouped`: a grouped product (group_tile): a is [1, T, K], b [G, N, K],
// c [1, 1, 1, T, N]; the boxes of A past a group's end read the next group's rows (or zeros),
// whose products are not stored.
template <class P>
void matmul_sm90(Tensor<const typename P::In> a, Tensor<const typename P::In> b,
                 Tensor<typename P::Out> c, Tensor<const f32> bias, Tensor<const i32> groups,
                 u32 a0, u32 a1, u32 a2, u32 b0, u32 b1, u32 b2, f32 alpha, f32 beta, int tile_n,
                 int stages, Epilogue epilogue, bool has_bias, bool grouped) {
  using T = typename P::In;
  if (!has_wgmma() || !has_tma()) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("matmul_sm90: wgmma is an sm_90a instruction; {} has none (kiln::lib::matmul "
                    "takes another path there)",
                    TraceContext::current().target().name));
    return;
  }
  const Swizzle sw = Swizzle::B128;
  const auto per_row = static_cast<uint32_t>(128 / static_cast<int>(sizeof(host_of_t<T>)));
  const auto un = static_cast<uint32_t>(tile_n), ns = static_cast<uint32_t>(stages);
  const uint32_t a_stage = 128u * per_row, b_stage = un * per_row, ld = un + 4u;
  const PipelineRegisters registers{40, 232};
  u32 k = a.shape(2);
  auto acc = accumulator<f32>(16, tile_n, mma_k_step<T>());
  auto as = shared_array<T>(ns * a_stage);
  auto bs = shared_array<T>(ns * b_stage);
  auto av = tma_view(a, {1, 64, static_cast<int>(per_row)}, sw);
  auto bv = tma_view(b, {1, tile_n, static_cast<int>(per_row)}, sw);
  const uint32_t stage_bytes = 2u * av.box_bytes() + bv.box_bytes();
  const TilePlace place = tma_tile_place(a, b, c, groups, bias, a0, a1, a2, b0, b1, b2, grouped);
  u32 za = place.za, zb = place.zb, m0 = place.m0;
  const Store<typename P::Out> store_c{c,     place.c_item, place.rows, place.bias_at, bias,
                                       alpha, beta,         has_bias,   epilogue};
  u32 wg = plane_pos() / 4u;
  u32 n0 = cube_pos_x() * un;
  // At least one round (K > 0 on this path) and visibly so: otherwise the compiler keeps a path
  // around the loop on which the zeros of `acc` are set again, and ptxas, seeing registers of
  // a wgmma defined by other instructions while multiplies are in flight, serializes every
  // wgmma (its note C7515).
  // (A cube of a grouped product past its last tile computes one round and stores nothing.)
  u32 rounds = max(select(place.rows > m0, (k + (per_row - 1u)) / per_row, 0u), 1u);
  fill(acc, 0.0f);
  pipeline(
      rounds, stages, 1, registers,
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        u32 k0 = r * per_row;
        mbarrier_arrive_expect_tx(full, s, stage_bytes);
        tma_load(as, s * a_stage, av, {za, m0, k0}, full, s);
        tma_load(as, s * a_stage + 64u * per_row, av, {za, m0 + 64u, k0}, full, s);
        tma_load(bs, s * b_stage, bv, {zb, n0, k0}, full, s);
      },
      [&](u32, u32 s) {
        wgmma_fence();
        for (uint32_t step = 0; step < 4; ++step)
          wgmma<T>(acc, wgmma_tile_desc(as, s * a_stage + wg * (64u * per_row), 64, sw, step),
                   wgmma_tile_desc(bs, s * b_stage, tile_n, sw, step));
        wgmma_commit();
        wgmma_wait(1);  // the round before is done: the pipeline releases its stage
      });
  wgmma_wait(0);
  auto out = shared_array<f32>(64u * ld);
  for (uint32_t g = 0; g < 2; ++g) {
    if_(wg == g, [&] { store(out, 16u * (plane_pos() % 4u) * ld, ld, acc); });
    sync_cube();
    for_range(unit_pos(), 64u * un, 256u, [&](u32 e) {
      u32 r = e / un, col = e % un;
      store_c(m0 + 64u * g + r, n0 + col, out[r * ld + col]);
    });
    sync_cube();  // the rows are out before the other warpgroup's overwrite them
  }
}
KILN_KERNEL_GENERIC(matmul_sm90,
                    "a: rank=3, b: rank=3, c: rank=5, bias, groups, a0, a1, a2, b0, b1, b2, "
                    "alpha, beta, tile_n = 128 in 16..256, stages = 4 in 2..6, epilogue = None, "
                    "has_bias = false, grouped = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>, InOut<f8e4m3, f32>, InOut<f8e4m3, f16>, InOut<f8e4m3, bf16>,
                    InOut<f8e5m2, f32>, InOut<f8e5m2, f16>, InOut<f8e5m2, bf16>)
    .cube_dim(256)
    .describe("kiln::lib::matmul on sm_90a: TMA ring, producer plane, two wgmma warpgroups");

// ---- tcgen05: TMA, a producer plane and tensor memory (sm_100a) ---------------------------------

// C = alpha A B^T + beta C (+ bias) through the epilogue, from K-major operands (as matmul_ring's).
// A cube of 128 units owns a 128 x tile_n tile of C, accumulated in tensor memory. A producer
// plane copies each round's boxes (A: 128 rows, B: tile_n rows, 128 bytes of k) into a ring of
// `stages` stages through TMA; unit 0 of the cube issues the round's four tcgen05.mma and commits
// them to the stage's empty mbarrier, which releases the stage when they are done
// (pipeline_committed), so the tensor cores never wait for the units. The epilogue reads the
// product 32 columns at a time (unit r its row r, tcgen05.ld), through shared memory so that its
// writes to C are along rows. `grouped`: a grouped product, as matmul_sm90's.
template <class P>
void matmul_sm100(Tensor<const typename P::In> a, Tensor<const typename P::In> b,
                  Tensor<typename P::Out> c, Tensor<const f32> bias, Tensor<const i32> groups,
                  u32 a0, u32 a1, u32 a2, u32 b0, u32 b1, u32 b2, f32 alpha, f32 beta, int tile_n,
                  int stages, Epilogue epilogue, bool has_bias, bool grouped) {
  using T = typename P::In;
  if (!has_tcgen05() || !has_tma()) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("matmul_sm100: tensor memory and tcgen05 are sm_100a instructions; {} has "
                    "none (kiln::lib::matmul takes another path there)",
                    TraceContext::current().target().name));
    return;
  }
  const Swizzle sw = Swizzle::B128;
  const auto per_row = static_cast<uint32_t>(128 / static_cast<int>(sizeof(host_of_t<T>)));
  const auto un = static_cast<uint32_t>(tile_n), ns = static_cast<uint32_t>(stages);
  const uint32_t a_stage = 128u * per_row, b_stage = un * per_row;
  int columns = 32;  // tensor memory comes in powers of two of at least 32 columns
  while (columns < tile_n) columns *= 2;
  if (tile_n % 32 != 0) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("matmul_sm100 reads its product 32 columns at a time: tile_n must be a "
                    "multiple of 32, not {}",
                    tile_n));
    return;
  }
  u32 k = a.shape(2);
  auto as = shared_array<T>(ns * a_stage);
  auto bs = shared_array<T>(ns * b_stage);
  auto av = tma_view(a, {1, 128, static_cast<int>(per_row)}, sw);
  auto bv = tma_view(b, {1, tile_n, static_cast<int>(per_row)}, sw);
  const uint32_t stage_bytes = av.box_bytes() + bv.box_bytes();
  const TilePlace place = tma_tile_place(a, b, c, groups, bias, a0, a1, a2, b0, b1, b2, grouped);
  u32 za = place.za, zb = place.zb, m0 = place.m0;
  const Store<typename P::Out> store_c{c,     place.c_item, place.rows, place.bias_at, bias,
                                       alpha, beta,         has_bias,   epilogue};
  u32 n0 = cube_pos_x() * un;
  // (A cube of a grouped product past its last tile computes one round and stores nothing.)
  u32 rounds = select(place.rows > m0, (k + (per_row - 1u)) / per_row, 1u);
  u32 d = tmem_alloc(columns);
  auto empty = pipeline_committed(
      rounds, stages,
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        u32 k0 = r * per_row;
        mbarrier_arrive_expect_tx(full, s, stage_bytes);
        tma_load(as, s * a_stage, av, {za, m0, k0}, full, s);
        tma_load(bs, s * b_stage, bv, {zb, n0, k0}, full, s);
      },
      [&](u32 r, u32 s, const SharedArray<u64>& release) {
        for (uint32_t step = 0; step < 4; ++step) {
          auto adesc = tcgen05_tile_desc(as, s * a_stage, 128, sw, step);
          auto bdesc = tcgen05_tile_desc(bs, s * b_stage, tile_n, sw, step);
          // The first multiply of the first round writes D; every other one adds to it.
          if (step == 0)
            tcgen05_mma<T>(d, adesc, bdesc, tile_n, r > 0u);
          else
            tcgen05_mma<T>(d, adesc, bdesc, tile_n, true);
        }
        tcgen05_commit(release, s);
      });
  // The last round's commit covers every multiply (K > 0 on this path: rounds >= 1).
  u32 last = rounds - 1u;
  mbarrier_wait(empty, last % ns, (last / ns) & 1u);
  auto out = shared_array<f32>(128u * 33u);
  u32 unit = unit_pos();
  for (uint32_t col = 0; col < un; col += 32) {
    for (uint32_t q = 0; q < 4; ++q) {
      f32 x = tmem_read<f32>(d, col + 8u * q, 8);
      for (int j = 0; j < 8; ++j)
        out[unit * 33u + 8u * q + static_cast<uint32_t>(j)] = extract(x, j);
    }
    sync_cube();
    for_range(unit, 128u * 32u, 128u, [&](u32 e) {
      store_c(m0 + e / 32u, n0 + col + e % 32u, out[e / 32u * 33u + e % 32u]);
    });
    sync_cube();
  }
  tmem_free(d, columns);
}
KILN_KERNEL_GENERIC(matmul_sm100,
                    "a: rank=3, b: rank=3, c: rank=5, bias, groups, a0, a1, a2, b0, b1, b2, "
                    "alpha, beta, tile_n = 128 in 32..256, stages = 4 in 2..6, epilogue = None, "
                    "has_bias = false, grouped = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>, InOut<f8e4m3, f32>, InOut<f8e4m3, f16>, InOut<f8e4m3, bf16>,
                    InOut<f8e5m2, f32>, InOut<f8e5m2, f16>, InOut<f8e5m2, bf16>)
    .cube_dim(128)
    .describe("kiln::lib::matmul on sm_100a: TMA ring, producer plane, tcgen05 into tensor memory");

// ---- split-K ----------------------------------------------------------------------------------

// C (c: [1, 1, 1, M, N]) = the epilogue of the sum of the parts (ws: [splits, M, N], the f32
// products of K's parts, as a batch of the tile kernels wrote them), added in the order of the
// parts: every element of C from its parts alone, the same bits however the grid runs.
template <class TC>
void matmul_split_sum(Tensor<const f32> ws, Tensor<TC> c, Tensor<const f32> bias, f32 alpha,
                      f32 beta, Epilogue epilogue, bool has_bias) {
  u32 splits = ws.shape(0), m = ws.shape(1), n = ws.shape(2);
  u32 e = absolute_pos();
  if_(e < m * n, [&] {
    Var<f32> sum = ws[e];
    for_range(1u, splits, 1u, [&](u32 s) { sum += ws[s * (m * n) + e]; });
    const Store<TC> store_c{c, u32(0u), m, u32(0u), bias, alpha, beta, has_bias, epilogue};
    store_c(e / n, e % n, sum);
  });
}
KILN_KERNEL_GENERIC(matmul_split_sum,
                    "ws: rank=3, c: rank=5, bias, alpha, beta, epilogue = None, has_bias = false",
                    f32, f16, bf16)
    .cube_dim(256)
    .describe("kiln::lib::matmul on a GPU: the parts of a split K summed, then the epilogue");

// ---- the choice ---------------------------------------------------------------------------------

namespace kiln::lib::detail {

namespace {

using ir::ElemType;

enum class Path { Portable, Ring, Sm90, Sm100 };

const char* kernel_of(Path p) {
  switch (p) {
    case Path::Ring:
      return "matmul_ring";
    case Path::Sm90:
      return "matmul_sm90";
    case Path::Sm100:
      return "matmul_sm100";
    default:
      return "matmul_gpu";
  }
}

// One configuration of a path: the cube's tile and its ring.
struct GpuConfig {
  Path path = Path::Portable;
  int warps_m = 4, warps_n = 2, frags_m = 1, frags_n = 2;  // ring
  int tile_n = 128;                                        // sm90, sm100
  int kc = 32, stages = 3;
  int tile_rows() const {
    if (path == Path::Ring) return warps_m * frags_m * 32;
    return path == Path::Portable ? 64 : 128;
  }
  int tile_cols() const {
    if (path == Path::Ring) return warps_n * frags_n * 32;
    return path == Path::Portable ? 64 : tile_n;
  }
  // The candidate's name for the tuner and for MatmulPlan.
  std::string text() const {
    if (path == Path::Portable) return "64x64 tiles, 2x2 planes";
    return fmt::format("{}x{}x{} tiles, {} stages", tile_rows(), tile_cols(), kc, stages);
  }
  // The shared memory a cube of it takes for inputs of `size` bytes (what the kernel declares).
  uint64_t shared_bytes(int size) const {
    const auto ring = [&](uint64_t rows, uint64_t row_bytes) {
      return static_cast<uint64_t>(stages) * rows * row_bytes;
    };
    switch (path) {
      case Path::Ring:
        return ring(static_cast<uint64_t>(tile_rows() + tile_cols()),
                    static_cast<uint64_t>(kc * size + 16)) +
               static_cast<uint64_t>(warps_m * warps_n) * 32 * 33 * 4;
      case Path::Sm90:
        return ring(static_cast<uint64_t>(128 + tile_n), 128) + 64ull * (tile_n + 4) * 4 + 2048;
      case Path::Sm100:
        return ring(static_cast<uint64_t>(128 + tile_n), 128) + 128ull * 33 * 4 + 2048;
      default:
        return 0;
    }
  }
};

// The path a device takes for inputs of `in` (and K values of k): by the features of its
// target, and whether its tensor cores take `in` at all (8-bit floats: sm_89 and later).
Path choose_path(const DeviceInfo& dev, ElemType in, bool allow_tf32, int64_t k) {
  const ir::Features& f = dev.features;
  bool takes = false;
  for (const ir::MatrixConfig& m : dev.matrix) takes = takes || m.input == in;
  const bool tensor_cores = takes && (in != ElemType::F32 || allow_tf32);
  if (k == 0 || !tensor_cores) return Path::Portable;
  if (f.tcgen05 && f.tma) return Path::Sm100;
  if (f.wgmma && f.tma) return Path::Sm90;
  if (f.cp_async) return Path::Ring;
  return Path::Portable;
}

// The path's candidates, its heuristic default first, those that fit the device's shared memory.
std::vector<GpuConfig> candidates(Path path, const DeviceInfo& dev, const MatmulProblem& p,
                                  int size) {
  std::vector<GpuConfig> all;
  GpuConfig g;
  g.path = path;
  switch (path) {
    case Path::Ring: {
      const int kc = 64 / size;  // 64 bytes of k per round: 32 f16, 16 f32
      auto ring = [&](int wm, int wn, int fm, int fn, int stages) {
        GpuConfig r = g;
        r.warps_m = wm;
        r.warps_n = wn;
        r.frags_m = fm;
        r.frags_n = fn;
        r.kc = kc;
        r.stages = stages;
        return r;
      };
      // Skinny products first take the narrower tiles, so that the machine fills.
      if (p.m <= 64 || p.n <= 64) all.push_back(ring(2, 2, 1, 1, 3));
      all.push_back(ring(4, 2, 1, 2, 4));
      all.push_back(ring(4, 2, 1, 2, 3));
      all.push_back(ring(2, 2, 1, 2, 4));
      all.push_back(ring(2, 4, 2, 1, 3));
      // (64 x 64 in 4 stages makes ptxas spill a word with CUDA 13: 3 stages.)
      all.push_back(ring(2, 2, 1, 1, 3));
      break;
    }
    case Path::Sm90:
    case Path::Sm100: {
      auto tile = [&](int n, int stages) {
        GpuConfig r = g;
        r.tile_n = n;
        r.kc = 128 / size;
        r.stages = stages;
        return r;
      };
      // 128 x 256 tiles when they alone fill the machine; 128 x 128 otherwise; 128 x 64 for
      // narrow products.
      const int64_t wide_tiles = (p.m + 127) / 128 * ((p.n + 255) / 256) * p.batch;
      if (p.n <= 64) all.push_back(tile(64, 6));
      if (p.n >= 256 && wide_tiles >= std::max(1, dev.cores)) all.push_back(tile(256, 3));
      all.push_back(tile(128, 5));
      all.push_back(tile(128, 4));
      all.push_back(tile(256, 3));
      all.push_back(tile(64, 6));
      break;
    }
    default:
      all.push_back(g);
  }
  std::vector<GpuConfig> out;
  for (const GpuConfig& c : all) {
    if (c.shared_bytes(size) > dev.shared_optin_bytes) continue;
    bool seen = false;
    for (const GpuConfig& o : out) seen = seen || o.text() == c.text();
    if (!seen) out.push_back(c);
  }
  if (out.empty()) {  // nothing fits (a device with little shared memory): the portable kernel
    GpuConfig portable;
    out.push_back(portable);
  }
  return out;
}

// An operand of the tensor-core paths: v ([B0, B1, B2, R, C], op(A) or op(B)) as [items, rows, K]
// with K contiguous, rows and items a whole number of 16-byte chunks apart, starting on 16
// bytes, K a whole number of chunks: v itself viewed so when it is, else a copy made by
// matmul_pack_rows (zeros from K to the next chunk). `cut` is v's dimension of rows.
struct Operand {
  Tensor t;
  bool copied = false;
};
Result<Operand> rows_of_k(Runtime& rt, const Tensor& v, int cut, int64_t padded_k = 0) {
  const int along = 7 - cut;
  const int64_t rows = v.shape(cut), k = v.shape(along);
  const auto size = static_cast<int64_t>(v.element_bytes());
  const int64_t chunk = 16 / size;
  int64_t items = 1;
  for (int d = 0; d < 3; ++d) items *= v.shape(d);
  // The batch dimensions collapse into one when each non-trivial one steps over the next.
  int64_t item_stride = rows * v.stride(cut);
  bool collapses = true;
  int last = -1;
  for (int d = 2; d >= 0; --d) {
    if (v.shape(d) == 1) continue;
    if (last < 0)
      item_stride = v.stride(d);
    else if (v.stride(d) != v.shape(last) * v.stride(last))
      collapses = false;
    last = d;
  }
  const int64_t row_stride = rows == 1 ? (k + chunk - 1) / chunk * chunk : v.stride(cut);
  const uintptr_t start =
      reinterpret_cast<uintptr_t>(v.buffer().data()) + static_cast<uintptr_t>(v.offset() * size);
  const bool direct =
      (padded_k == 0 || padded_k == k) && collapses && (v.stride(along) == 1 || k == 1) &&
      k % chunk == 0 && row_stride % chunk == 0 && row_stride > 0 &&
      (items == 1 || (item_stride % chunk == 0 && item_stride > 0)) && start % 16 == 0 &&
      row_stride * size < (int64_t{1} << 40) && item_stride * size < (int64_t{1} << 40);
  if (direct) {
    const int64_t is = items == 1 ? rows * row_stride : item_stride;
    KILN_ASSIGN(Tensor t, Tensor::make(v.device_ptr(), v.buffer(), v.dtype(),
                                       std::vector<int64_t>{items, rows, k},
                                       std::vector<int64_t>{is, row_stride, 1}, v.offset()));
    return Operand{t, false};
  }
  const int64_t kp = std::max(padded_k, (k + chunk - 1) / chunk * chunk);
  if (items * rows * kp >= (int64_t{1} << 32))
    return matmul_error(
        fmt::format("an operand copied into rows of K would hold {} elements; the kernels index "
                    "at most 2^32 - 1 (split the product)",
                    items * rows * kp));
  if ((rows + 31) / 32 > 65535)
    return matmul_error(
        fmt::format("an operand of {} rows is more than a GPU grid's 65535 "
                    "blocks of 32 (split the product)",
                    rows));
  KILN_ASSIGN(Tensor packed, rt.empty(v.dtype(), {items, rows, kp}));
  KILN_ASSIGN(const Kernel pack, rt.kernel("matmul_pack_rows"));
  auto u = [](int64_t x) { return static_cast<uint32_t>(x); };
  // Reads along K when K is the contiguous dimension of the two (by its stride).
  const bool k_inner = std::abs(v.stride(along)) <= std::abs(v.stride(cut));
  KILN_TRY(rt.launch(pack, Dim3(u((kp + 31) / 32), u((rows + 31) / 32), u(items)), Dim3(256),
                     v.as_read_only(), packed, cut, k_inner));
  KILN_ASSIGN(Tensor t, Tensor::make(packed.device_ptr(), packed.buffer(), packed.dtype(),
                                     std::vector<int64_t>{items, rows, k},
                                     std::vector<int64_t>{rows * kp, kp, 1}, packed.offset()));
  return Operand{t, true};
}

Result<Tensor> bias_or_dummy(Runtime& rt, const MatmulOptions& o) {
  if (o.bias) return o.bias->as_read_only();
  return rt.empty(ElemType::F32, {1});
}

// The groups of a grouped product (their rows' cumulative ends, i32 [G]), or none.
struct Groups {
  const Tensor* ends = nullptr;
  int64_t count() const { return ends ? ends->shape(0) : 0; }
};

// The kernels' `groups` argument: the ends, or a placeholder when the product is not grouped.
Result<Tensor> groups_or_dummy(Runtime& rt, const Groups& g) {
  if (g.ends) return g.ends->as_read_only();
  return rt.empty(ElemType::I32, {1});
}

// The cubes along M for tiles of `rows`: every tile of the product, or for a grouped product
// the most tiles any ends can make (group_tile).
Result<int64_t> row_tiles(const MatmulProblem& p, const Groups& g, int64_t rows) {
  const int64_t tiles = (p.m + rows - 1) / rows + g.count();
  if (tiles > 65535)
    return matmul_error(fmt::format("M = {}{} is more than a GPU grid's 65535 tiles of {} rows",
                                    p.m, g.ends ? fmt::format(" in {} groups", g.count()) : "",
                                    rows));
  return tiles;
}

Status run_portable(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                    const Groups& groups = {}) {
  constexpr int kFrag = 32, kPlanes = 2, kTile = kFrag * kPlanes;
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  KILN_ASSIGN(const int64_t tiles_m, row_tiles(p, groups, kTile));
  KILN_ASSIGN(const Tensor bias, bias_or_dummy(rt, o));
  KILN_ASSIGN(const Tensor ends, groups_or_dummy(rt, groups));
  KILN_ASSIGN(const Kernel gemm, rt.kernel("matmul_gpu"));
  Tensor c = p.c;
  // f32 inputs stay f32 (FMAs) unless tf32 tensor cores are allowed.
  const bool fragments = p.a.dtype() != ElemType::F32 || o.allow_tf32;
  return rt.launch(gemm, Dim3(u((p.n + kTile - 1) / kTile), u(tiles_m), u(p.batch)),
                   Dim3(32 * kPlanes * kPlanes), p.a.as_read_only(), p.b.as_read_only(), c, bias,
                   ends, o.alpha, o.beta, kFrag, kFrag, kPlanes, kPlanes, 2, fragments, o.epilogue,
                   o.bias != nullptr, groups.ends != nullptr);
}

// One tensor-core product with `cfg`, from operands already in rows of K.
Status run_tiles(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o, const GpuConfig& cfg,
                 const Tensor& a, const Tensor& b, const Groups& groups = {}) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  KILN_ASSIGN(const int64_t tiles_m, row_tiles(p, groups, cfg.tile_rows()));
  const int64_t tiles_n = (p.n + cfg.tile_cols() - 1) / cfg.tile_cols();
  KILN_ASSIGN(const Tensor bias, bias_or_dummy(rt, o));
  KILN_ASSIGN(const Tensor ends, groups_or_dummy(rt, groups));
  KILN_ASSIGN(const Kernel gemm, rt.kernel(kernel_of(cfg.path)));
  Tensor c = p.c;
  const Dim3 cubes(u(tiles_n), u(tiles_m), u(p.batch));
  const bool grouped = groups.ends != nullptr;
  const uint32_t a0 = u(p.a.shape(0)), a1 = u(p.a.shape(1)), a2 = u(p.a.shape(2)),
                 b0 = u(p.b.shape(0)), b1 = u(p.b.shape(1)), b2 = u(p.b.shape(2));
  if (cfg.path == Path::Ring)
    return rt.launch(gemm, cubes, Dim3(u(32 * cfg.warps_m * cfg.warps_n)), a.as_read_only(),
                     b.as_read_only(), c, bias, ends, a0, a1, a2, b0, b1, b2, o.alpha, o.beta,
                     cfg.warps_m, cfg.warps_n, cfg.frags_m, cfg.frags_n, cfg.kc, cfg.stages,
                     o.epilogue, o.bias != nullptr, grouped);
  return rt.launch(gemm, cubes, Dim3(cfg.path == Path::Sm90 ? 256u : 128u), a.as_read_only(),
                   b.as_read_only(), c, bias, ends, a0, a1, a2, b0, b1, b2, o.alpha, o.beta,
                   cfg.tile_n, cfg.stages, o.epilogue, o.bias != nullptr, grouped);
}

std::string why(Path path, const DeviceInfo& dev, const MatmulProblem& p, const MatmulOptions& o);

// MatmulPlan::config for a tensor-core path: the candidate, its producer, `split` (how K was
// divided, if it was) and the operands copied into rows of K.
std::string plan_config(const GpuConfig& cfg, bool a_copied, bool b_copied,
                        const std::string& split = "") {
  std::string config = cfg.text();
  if (cfg.path == Path::Sm90) config += ", a producer warpgroup (setmaxnreg 40/232)";
  if (cfg.path == Path::Sm100) config += ", a producer plane";
  config += split;
  if (a_copied || b_copied)
    config += fmt::format("; {} copied into rows of K first", a_copied && b_copied ? "A and B"
                                                              : a_copied           ? "A"
                                                                                   : "B");
  return config;
}

// K's parts for a product of few tiles: options.split_k when set, else as many as fill the
// machine's SMs twice over with at least 1024 of K each (at most 8), when one product alone
// leaves more than half of them idle. 1 is no split. One product only (no batch).
constexpr int64_t kSplitStep = 128;  // each part's K: a multiple of every path's round
int64_t split_count(const DeviceInfo& dev, const MatmulProblem& p, const MatmulOptions& o,
                    const GpuConfig& cfg) {
  if (p.batch != 1 || o.split_k == 1) return 1;
  const int64_t most = std::max<int64_t>(1, (p.k + kSplitStep - 1) / kSplitStep);
  if (o.split_k > 1) return std::min<int64_t>(o.split_k, most);
  const int64_t tiles = (p.m + cfg.tile_rows() - 1) / cfg.tile_rows() *
                        ((p.n + cfg.tile_cols() - 1) / cfg.tile_cols());
  const int64_t sms = std::max(1, dev.cores);
  if (tiles * 2 > sms) return 1;
  return std::clamp<int64_t>(std::min(sms / tiles, p.k / 1024), 1, 8);
}

// The product as `splits` products over parts of K (a batch of one launch of the tile kernel,
// into an f32 workspace), then matmul_split_sum.
Status run_split(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o, const GpuConfig& cfg,
                 int64_t splits, Path path) {
  const int64_t part = (p.k + splits * kSplitStep - 1) / (splits * kSplitStep) * kSplitStep;
  splits = (p.k + part - 1) / part;
  KILN_ASSIGN(const Operand a, rows_of_k(rt, p.a, 3, splits * part));
  KILN_ASSIGN(const Operand b, rows_of_k(rt, p.b, 4, splits * part));
  // Part s of an operand: its rows at columns s part .. (s + 1) part - 1 (zeros past K: the
  // copy is padded to splits parts).
  auto parts = [&](const Tensor& t) {
    return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(),
                        std::vector<int64_t>{splits, t.shape(1), part},
                        std::vector<int64_t>{part, t.stride(1), 1}, t.offset());
  };
  KILN_ASSIGN(const Tensor ap, parts(a.t));
  KILN_ASSIGN(const Tensor bp, parts(b.t));
  KILN_ASSIGN(Tensor ws, rt.empty(ElemType::F32, {splits, p.m, p.n}));
  MatmulProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = part;
  q.batch = q.batch_a = q.batch_b = splits;
  KILN_ASSIGN(q.a, matmul_rank5(ap, false));
  KILN_ASSIGN(q.b, matmul_rank5(bp, false));
  KILN_ASSIGN(q.c, matmul_rank5(ws, false));
  MatmulOptions plain;
  KILN_TRY(run_tiles(rt, q, plain, cfg, ap, bp));
  KILN_ASSIGN(const Tensor bias, bias_or_dummy(rt, o));
  KILN_ASSIGN(const Kernel sum, rt.kernel("matmul_split_sum"));
  Tensor c = p.c;
  const int64_t cubes = (p.m * p.n + 255) / 256;
  KILN_TRY(rt.launch(sum, Dim3(static_cast<uint32_t>(cubes)), Dim3(256), ws.as_read_only(), c, bias,
                     o.alpha, o.beta, o.epilogue, o.bias != nullptr));
  if (o.plan)
    *o.plan = {
        kernel_of(path),
        plan_config(cfg, a.copied, b.copied,
                    fmt::format(", K in {} parts of {} summed by matmul_split_sum", splits, part)),
        fmt::format("{}; few tiles for the machine: K split", why(path, rt.device(), p, o))};
  return {};
}

std::string why(Path path, const DeviceInfo& dev, const MatmulProblem& p, const MatmulOptions& o) {
  switch (path) {
    case Path::Sm100:
      return fmt::format("{} ({}) has tcgen05 and TMA", dev.name, dev.arch);
    case Path::Sm90:
      return fmt::format("{} ({}) has wgmma and TMA", dev.name, dev.arch);
    case Path::Ring:
      return fmt::format("{} ({}) has cp.async and mma.sync", dev.name, dev.arch);
    default:
      if (p.k == 0) return "K = 0: C is only scaled";
      if (p.a.dtype() == ElemType::F32 && !o.allow_tf32)
        return "f32 inputs without allow_tf32: f32 FMAs";
      if (ir::is_f8(p.a.dtype()))
        return fmt::format("{} ({}) has no tensor-core multiply of {}: f32 FMAs", dev.name,
                           dev.arch, ir::elem_name(p.a.dtype()));
      return fmt::format("{} ({}) has none of cp.async, wgmma, tcgen05", dev.name, dev.arch);
  }
}

}  // namespace

std::vector<MatmulSpecialization> matmul_gpu_specializations(const DeviceInfo& dev, ir::ElemType in,
                                                             bool allow_tf32) {
  std::vector<MatmulSpecialization> out;
  // Shapes that bring in every candidate: a skinny one (narrow tiles first) and a large one.
  for (const int64_t n : {int64_t{32}, int64_t{4096}}) {
    MatmulProblem p;
    p.m = 4096;
    p.n = n;
    p.k = 4096;
    const Path path = choose_path(dev, in, allow_tf32, p.k);
    for (const GpuConfig& c : candidates(path, dev, p, static_cast<int>(ir::elem_bytes(in)))) {
      MatmulSpecialization s;
      s.kernel = kernel_of(c.path);
      if (c.path == Path::Ring)
        s.set = {{"warps_m", std::to_string(c.warps_m)}, {"warps_n", std::to_string(c.warps_n)},
                 {"frags_m", std::to_string(c.frags_m)}, {"frags_n", std::to_string(c.frags_n)},
                 {"kc", std::to_string(c.kc)},           {"stages", std::to_string(c.stages)}};
      else if (c.path != Path::Portable)
        s.set = {{"tile_n", std::to_string(c.tile_n)}, {"stages", std::to_string(c.stages)}};
      bool seen = false;
      for (const MatmulSpecialization& o2 : out)
        seen = seen || (o2.kernel == s.kernel && o2.set == s.set);
      if (!seen) out.push_back(std::move(s));
    }
  }
  return out;
}

Status matmul_on_gpu(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o) {
  const DeviceInfo& dev = rt.device();
  const Path path = choose_path(dev, p.a.dtype(), o.allow_tf32, p.k);
  if (path == Path::Portable) {
    if (o.plan) *o.plan = {"matmul_gpu", GpuConfig{}.text(), why(path, dev, p, o)};
    return run_portable(rt, p, o);
  }
  const std::vector<GpuConfig> cands =
      candidates(path, dev, p, static_cast<int>(ir::elem_bytes(p.a.dtype())));
  if (cands.front().path != Path::Portable) {
    const int64_t splits = split_count(dev, p, o, cands.front());
    if (splits > 1) return run_split(rt, p, o, cands.front(), splits, path);
  }
  KILN_ASSIGN(const Operand a, rows_of_k(rt, p.a, 3));
  KILN_ASSIGN(const Operand b, rows_of_k(rt, p.b, 4));
  if (cands.front().path == Path::Portable) {
    if (o.plan)
      *o.plan = {"matmul_gpu", GpuConfig{}.text(),
                 fmt::format("no {} tile fits {}'s {} bytes of shared memory per cube",
                             kernel_of(path), dev.name, dev.shared_optin_bytes)};
    return run_portable(rt, p, o);
  }
  size_t pick = 0;
  // The emulator's times say nothing of a GPU's: it tunes only when asked (kiln tune, full).
  const AutotuneMode mode = autotune_mode();
  if (cands.size() > 1 && mode != AutotuneMode::Off &&
      (!dev.emulated || mode == AutotuneMode::Full)) {
    std::vector<std::string> texts;
    for (const GpuConfig& c : cands) texts.push_back(c.text());
    const std::string key =
        fmt::format("{} {}->{} m<={} n<={} k<={} batch<={}", kernel_of(path),
                    ir::elem_name(p.a.dtype()), ir::elem_name(p.c.dtype()), matmul_bucket(p.m),
                    matmul_bucket(p.n), matmul_bucket(p.k), matmul_bucket(p.batch));
    pick = matmul_tune(rt, p, o, key, texts, 3,
                       [&](const MatmulProblem& q, const MatmulOptions& qo, size_t i) {
                         return run_tiles(rt, q, qo, cands[i], a.t, b.t);
                       });
  }
  const GpuConfig& cfg = cands[pick];
  if (o.plan)
    *o.plan = {kernel_of(path), plan_config(cfg, a.copied, b.copied), why(path, dev, p, o)};
  return run_tiles(rt, p, o, cfg, a.t, b.t);
}

Status grouped_matmul_on_gpu(Runtime& rt, const MatmulProblem& p, const Tensor& ends,
                             const MatmulOptions& o) {
  const DeviceInfo& dev = rt.device();
  const Groups groups{&ends};
  const int64_t count = groups.count();
  const Path path = choose_path(dev, p.a.dtype(), o.allow_tf32, p.k);
  const std::string grouped = fmt::format(", {} groups in one launch", count);
  if (path != Path::Portable) {
    // The configuration of a product of the groups' mean rows (no tuning: a grouped call's
    // groups change from call to call).
    MatmulProblem mean = p;
    mean.m = std::max<int64_t>(1, p.m / std::max<int64_t>(1, count));
    mean.batch = count;
    const std::vector<GpuConfig> cands =
        candidates(path, dev, mean, static_cast<int>(ir::elem_bytes(p.a.dtype())));
    if (cands.front().path != Path::Portable) {
      KILN_ASSIGN(const Operand a, rows_of_k(rt, p.a, 3));
      KILN_ASSIGN(const Operand b, rows_of_k(rt, p.b, 4));
      const GpuConfig& cfg = cands.front();
      if (o.plan)
        *o.plan = {kernel_of(path), plan_config(cfg, a.copied, b.copied, grouped),
                   why(path, dev, p, o)};
      return run_tiles(rt, p, o, cfg, a.t, b.t, groups);
    }
  }
  if (o.plan) *o.plan = {"matmul_gpu", GpuConfig{}.text() + grouped, why(path, dev, p, o)};
  return run_portable(rt, p, o, groups);
}

}  // namespace kiln::lib::detail
