// Clusters (sm_90 and later) in the DSL: the kernel's cluster shape, a cube's rank in its
// cluster, cluster-wide barriers, TMA boxes multicast to several cubes, and reads of another
// cube's shared memory (distributed shared memory). docs/dsl.md "Clusters" is the guide.
//
//   cluster_dims(2);                              // cubes 2c and 2c + 1 (along x) form a cluster
//   auto part = shared_array<f32>(256);
//   part[unit_pos()] = partial;
//   sync_cluster();                               // both halves written, in both cubes
//   f32 other = cluster_load(part, cluster_rank() ^ 1u, unit_pos());
//   sync_cluster();                               // neither cube leaves while the other reads
//
// A cluster's cubes run at the same time on neighbouring SMs; on the CPU and the emulator they
// run together too, switching at sync_cluster and at mbarrier waits, so a kernel that needs its
// cluster's cubes at once runs there unchanged.
#pragma once

#include "compiler/dsl/tma.h"

namespace kiln::dsl {

// Whether the target has clusters (asked at trace time): sm_90 and later, the CPU and the
// emulator; the same targets as has_tma().
inline bool has_clusters() {
  return TraceContext::current().target().features.tma;
}

// The cluster shape: x * y * z neighbouring cubes of the grid (at most 8) form a cluster, which
// the grid's cube counts must be multiples of at launch. Call once, at the top level of the
// kernel; without it a cube is its own cluster.
inline void cluster_dims(uint32_t x, uint32_t y = 1, uint32_t z = 1,
                         SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!has_clusters()) {
    ctx.fail(where, fmt::format("clusters are sm_90 features; {} has none: ask has_clusters() at "
                                "trace time",
                                ctx.target().name));
    return;
  }
  const uint64_t n = uint64_t{x} * y * z;
  if (n == 0 || n > ir::kMaxCubesPerCluster) {
    ctx.fail(where, fmt::format("a cluster of {}x{}x{} cubes; use 1 to {} cubes per cluster", x, y,
                                z, ir::kMaxCubesPerCluster));
    return;
  }
  const auto& k = ctx.builder().kernel();
  if (k.cluster_dim != std::array<uint32_t, 3>{1, 1, 1} &&
      k.cluster_dim != std::array<uint32_t, 3>{x, y, z}) {
    ctx.fail(where, fmt::format("the cluster shape is already {}x{}x{}; call cluster_dims once",
                                k.cluster_dim[0], k.cluster_dim[1], k.cluster_dim[2]));
    return;
  }
  ctx.builder().set_cluster_dim(x, y, z);
}

// The cube's index in its cluster: x + y * cx + z * cx * cy for its position (x, y, z) in the
// cluster of cx x cy x cz cubes; 0 without clusters.
inline Val<uint32_t> cluster_rank(SrcLoc w = SrcLoc::current()) {
  return detail::builtin(ir::OpKind::ClusterRank, 0, w);
}

// Waits until every unit of every cube of the cluster arrives (a sync_cube for the cluster):
// shared memory written before it, in any cube of the cluster, may be read after it through
// cluster_load, and a tma_load_multicast after it may write what any cube read before it.
inline void sync_cluster(SrcLoc w = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  if (!has_clusters()) {
    ctx.fail(w, fmt::format("sync_cluster is an sm_90 feature; {} has none: ask has_clusters() "
                            "at trace time",
                            ctx.target().name));
    return;
  }
  ctx.builder().op(ir::OpKind::SyncCluster, {}, ctx.loc(w));
}

// Element `index` of shared array `m` of the cube of rank `rank` in this cube's cluster. Reads
// are ordered by sync_cluster: the other cube wrote it before a sync_cluster that this read
// follows, and does not leave the kernel (or write it again) until a sync_cluster after it.
template <class V>
Val<host_of_t<V>> cluster_load(const SharedArray<V>& m, Arg<uint32_t> rank, Arg<uint32_t> index) {
  auto& ctx = TraceContext::current();
  if (!has_clusters()) {
    ctx.fail(index.where(), fmt::format("cluster_load reads distributed shared memory, an sm_90 "
                                        "feature; {} has none: ask has_clusters() at trace time",
                                        ctx.target().name));
    return Val<host_of_t<V>>::from_id(ir::kNoValue);
  }
  return Val<host_of_t<V>>::from_id(ctx.builder().op(
      ir::OpKind::ClusterLoad, {m.id(), rank.value(1), index.value(1)}, index.at()));
}

// Whether the target multicasts TMA boxes (asked at trace time): sm_90a and sm_100a, the CPU and
// the emulator of those; other targets copy each cube's box with tma_load.
inline bool has_multicast() {
  return TraceContext::current().target().features.multicast;
}

// tma_load, with the box landing at dst[index ...] and completing on bars[bar_index] in every
// cube of the cluster whose rank is a bit of `mask` (bit r: rank r; the issuing cube's own bit
// too if it wants the box), read from global memory once. Each of those cubes expects the bytes
// on its own mbarrier (mbarrier_arrive_expect_tx). A cube operation; the destination cubes must
// have initialized their mbarriers and finished reading dst before it (a sync_cluster).
template <class V, class W, class B>
void tma_load_multicast(const SharedArray<W>& dst, Arg<uint32_t> index, const TmaView<V>& view,
                        std::initializer_list<TmaCoord> coords, const SharedArray<B>& bars,
                        Arg<uint32_t> bar_index, Arg<uint32_t> mask) {
  static_assert(std::is_same_v<host_of_t<V>, host_of_t<W>>,
                "kiln: tma_load_multicast copies into a shared array of the tensor's element type");
  static_assert(detail::is_mbarrier_array<B>, "kiln: mbarriers live in a shared array of u64");
  auto& ctx = TraceContext::current();
  if (!has_multicast()) {
    ctx.fail(index.where(),
             fmt::format("TMA multicast is for sm_90a and sm_100a; {} has none to use: ask "
                         "has_multicast() at trace time and copy each cube's box with tma_load",
                         ctx.target().name));
    return;
  }
  if (coords.size() != view.box().rank) {
    ctx.fail(index.where(),
             fmt::format("tma_load_multicast of a rank-{} view takes {} coordinates, not {}",
                         view.box().rank, view.box().rank, coords.size()));
    return;
  }
  const ir::ValueId mask16 = ctx.builder().op(ir::OpKind::Cast, {mask.value(1)}, mask.at(),
                                              ir::Type::value(ir::ElemType::U16));
  std::vector<ir::ValueId> ops = {dst.id(),  index.value(1),     view.tensor().id(),
                                  bars.id(), bar_index.value(1), mask16};
  for (const TmaCoord& c : coords) ops.push_back(c.id());
  ir::Attr a;
  a.i = ir::tma_attr(view.box());
  ctx.builder().op(ir::OpKind::TmaLoadMulticast, ops, index.at(), {}, a);
}

}  // namespace kiln::dsl
