// The CUDA emulator's execution engine: fibers, the cube scheduler, barriers, warp collectives,
// memory checks and the shared-memory race detector (exec.h).
#include "runtime/emu/exec.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "runtime/thread_pool.h"

#include "runtime/emu/engine.h"
#include "runtime/fiber.h"

namespace kiln::detail::emu {

using ::kiln::emu::Api;
using ::kiln::emu::Dim3;
using ::kiln::emu::Unit;
namespace abi = ::kiln::emu;
using namespace ::kiln::detail::fiber;

namespace {

// ---- allocations ----------------------------------------------------------------------------

struct Registry {
  std::shared_mutex mu;
  std::map<uintptr_t, size_t> blocks;  // start -> bytes
  std::atomic<uint64_t> version{1};    // bumped by every release (cached ranges go stale)
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: allocations may outlive statics
  return *r;
}

bool in_allocation(uintptr_t a, uint64_t bytes, RangeCache& c) {
  if (a + bytes < a) return false;
  Registry& r = registry();
  const uint64_t v = r.version.load(std::memory_order_acquire);
  if (c.version == v) {
    for (int i = 0; i < RangeCache::kWays; ++i)
      if (a >= c.lo[i] && a + bytes <= c.hi[i]) return true;
  } else {
    c = RangeCache{};
    c.version = v;
  }
  std::shared_lock lock(r.mu);
  auto it = r.blocks.upper_bound(a);
  if (it == r.blocks.begin()) return false;
  --it;
  const uintptr_t lo = it->first, hi = it->first + it->second;
  if (a + bytes > hi) return false;
  c.lo[c.next] = lo;
  c.hi[c.next] = hi;
  c.next = (c.next + 1) % RangeCache::kWays;
  return true;
}

// What is near an address outside every allocation, for the message.
std::string nearest_allocation(uintptr_t a) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  auto it = r.blocks.upper_bound(a);
  if (it != r.blocks.begin()) {
    auto prev = std::prev(it);
    const uintptr_t end = prev->first + prev->second;
    if (a >= prev->first && a < end)
      return fmt::format("; it runs past the end of the {}-byte allocation at {:#x}", prev->second,
                         prev->first);
    if (a >= end && a - end < (uintptr_t{1} << 30))
      return fmt::format("; that is {} bytes past the end of the {}-byte allocation at {:#x}",
                         a - end, prev->second, prev->first);
  }
  return {};
}

Worker& worker() {
  thread_local Worker w;
  return w;
}

// The unit whose stack this is (kHeaderBytes): called by the entry points below, which run on
// a unit's stack.
inline Slot*& stack_slot(char* stack) {
  return *reinterpret_cast<Slot**>(stack + kStackBytes - kHeaderBytes);
}
__attribute__((always_inline)) inline Slot& here() {
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return *stack_slot(reinterpret_cast<char*>(frame & ~uintptr_t{kStackBytes - 1}));
}

// Hands the thread to the next ready unit of this pass (units run in order), or back to the
// scheduler when none is left; returns when this unit runs again.
void yield(Slot& s) {
  Cube& c = *s.cube;
  const bool finished = s.state == State::Done;
  if (!c.cl.stop)
    for (uint32_t u = s.global + 1; u < c.cl.units; ++u) {
      Slot& next = c.w.slots[u];
      if (next.state != State::Ready) continue;
      fiber_switch(s.fiber, next.fiber, finished);
      return;
    }
  fiber_switch(s.fiber, c.w.main, finished);
}

// The units of a kernel without barriers or collectives, in order, on the worker's plain
// stack; then back to the scheduler.
void plain_main(void* arg) {
  Cube& c = *static_cast<Cube*>(arg);
  Worker& w = c.w;
  fiber_arrived(w.plain);
  for (uint32_t u = 0; u < c.units; ++u) {
    stack_slot(w.plain.stack) = &w.slots[u];
    c.L.module->unit(c.L.slots);
  }
  fiber_switch(w.plain, w.main, /*finished=*/true);
  KILN_CHECK(false, "a finished emulator stack was resumed");
}

void fiber_main(void* arg) {
  Slot& s = *static_cast<Slot*>(arg);
  fiber_arrived(s.fiber);
  s.cube->L.module->unit(s.cube->L.slots);
  s.state = State::Done;
  ++s.cube->done;
  ++s.cube->cl.progress;
  if (s.cube->done == s.cube->units) cube_exited(*s.cube);
  yield(s);
  KILN_CHECK(false, "a finished emulator fiber was resumed");
}

// ---- the emulator's side of kiln_emu_abi.h ----------------------------------------------------

// Source files are the module's string literals: usually the same pointer.
inline bool same_file(const char* a, const char* b) {
  return a == b || std::strcmp(a, b) == 0;
}

Unit* api_current() {
  return &here().u;
}

void report_no_fibers(Cube& c, Slot& s, const char* what, const char* file, uint32_t line) {
  c.report(s.linear, fmt::format("{}: error: {} in {} of a kernel compiled as free of barriers "
                                 "and collectives (an emulator bug; please report it)",
                                 at(file, line), what, c.where_in(s.linear)));
}

// Every unit still in the cube has arrived at the barrier: they go on.
void complete_barrier(Cube& c) {
  for (uint32_t u = 0; u < c.units; ++u)
    if (c.slot(u).state == State::Barrier) c.slot(u).state = State::Ready;
  c.barrier_arrived = 0;
  ++c.epoch;
}

void api_barrier(const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  ++c.cl.progress;
  if (!c.L.fibers) {
    report_no_fibers(c, s, "a sync_cube", file, line);
    return;
  }
  if (c.barrier_arrived > 0 && (c.barrier_line != line || !same_file(c.barrier_file, file))) {
    c.report(s.linear,
             fmt::format("{}: error: units of cube {} are at different barriers in kernel '{}': "
                         "unit {} reached this sync_cube while others wait at the one at {} "
                         "(every unit of a cube must reach the same sync_cube; the cube was "
                         "stopped)",
                         at(file, line), c.cube, c.L.kernel, s.linear,
                         at(c.barrier_file, c.barrier_line)));
    c.cl.stop = true;
    s.state = State::Barrier;
    yield(s);
    return;
  }
  if (c.barrier_arrived == 0) {
    c.barrier_file = file;
    c.barrier_line = line;
  }
  s.file = file;
  s.line = line;
  if (++c.barrier_arrived == c.units - c.retired) {
    // The last unit releases the others and goes on.
    complete_barrier(c);
    return;
  }
  s.state = State::Barrier;
  yield(s);
}

const char* collective_words(uint32_t kind) {
  switch (kind) {
    case abi::kShuffle:
      return "a shuffle";
    case abi::kAny:
      return "a vote (any)";
    case abi::kAll:
      return "a vote (all)";
    case abi::kBallot:
      return "a ballot";
    case abi::kSyncWarp:
      return "a warp barrier (sync_plane)";
    default:
      return "a warp reduction (__reduce_*_sync)";
  }
}

// The reduction of the mask's lanes for the votes, ballots and __reduce_*_sync kinds.
uint64_t reduce(const Cube& c, const WarpOp& op, uint32_t warp) {
  uint32_t r = 0;
  bool first = true;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!(op.mask >> l & 1u)) continue;
    const auto v = static_cast<uint32_t>(c.slot(warp * 32 + l).value);
    const auto sv = static_cast<int32_t>(v), sr = static_cast<int32_t>(r);
    switch (op.kind) {
      case abi::kAny:
        r |= v != 0;
        break;
      case abi::kAll:
        r = (first || r) && v != 0;
        break;
      case abi::kBallot:
        r |= (v != 0 ? 1u : 0u) << l;
        break;
      case abi::kReduceAdd:
        r += v;
        break;
      case abi::kReduceMinU:
        r = first || v < r ? v : r;
        break;
      case abi::kReduceMaxU:
        r = first || v > r ? v : r;
        break;
      case abi::kReduceMinS:
        r = first || sv < sr ? v : r;
        break;
      case abi::kReduceMaxS:
        r = first || sv > sr ? v : r;
        break;
      case abi::kReduceAnd:
        r = first ? v : r & v;
        break;
      case abi::kReduceOr:
        r |= v;
        break;
      case abi::kReduceXor:
        r ^= v;
        break;
      default:
        break;
    }
    first = false;
  }
  return r;
}

// Every lane of the mask has arrived: the results, and the lanes go on.
void complete(Cube& c, const WarpOp& op, uint32_t warp) {
  const uint64_t reduced =
      op.kind == abi::kShuffle || op.kind == abi::kSyncWarp ? 0 : reduce(c, op, warp);
  for (uint32_t l = 0; l < 32; ++l) {
    if (!(op.mask >> l & 1u)) continue;
    Slot& o = c.slot(warp * 32 + l);
    if (op.kind == abi::kShuffle) {
      const uint32_t src = o.operand % 32u;
      if (!(op.mask >> src & 1u)) {
        c.report(o.linear, fmt::format("{}: error: a shuffle in {} reads lane {}, which is not in "
                                       "its mask {:#010x} (the value read is undefined on a GPU)",
                                       at(op.file, op.line), c.where_in(o.linear), src, op.mask));
        o.result = o.value;
      } else {
        o.result = c.slot(warp * 32 + src).value;
      }
    } else {
      o.result = reduced;
    }
  }
  if (op.kind == abi::kSyncWarp) ++c.warp_epoch[warp];
  for (uint32_t l = 0; l < 32; ++l)
    if (op.mask >> l & 1u) {
      Slot& o = c.slot(warp * 32 + l);
      if (o.state == State::Collective) o.state = State::Ready;
    }
}

uint64_t api_collective(uint32_t kind, uint32_t mask, uint64_t value, uint32_t operand,
                        const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  ++c.cl.progress;
  if (!c.L.fibers) {
    report_no_fibers(c, s, collective_words(kind), file, line);
    return value;
  }
  const uint32_t lane = s.linear & 31u, warp = s.linear >> 5;
  if (!(mask >> lane & 1u)) {
    c.report(s.linear,
             fmt::format("{}: error: {} in {} has the mask {:#010x}, which leaves out "
                         "the calling lane {}",
                         at(file, line), collective_words(kind), c.where_in(s.linear), mask, lane));
    return value;
  }
  // The lanes of a mask meet at one call site: the same kind, mask and source line.
  std::vector<WarpOp>& waiting = c.warps[warp];
  size_t i = 0;
  while (i < waiting.size() && !(waiting[i].kind == kind && waiting[i].mask == mask &&
                                 waiting[i].line == line && same_file(waiting[i].file, file)))
    ++i;
  if (i == waiting.size()) waiting.push_back(WarpOp{kind, mask, 0, lane, file, line});
  s.value = value;
  s.operand = operand;
  s.file = file;
  s.line = line;
  waiting[i].arrived |= 1u << lane;
  if (waiting[i].arrived == mask) {
    const WarpOp op = waiting[i];
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    complete(c, op, warp);
    return s.result;
  }
  s.state = State::Collective;
  yield(s);
  return s.result;
}

bool api_access(const void* p, uint64_t bytes, uint32_t how, const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  if (how & abi::kStore) ++c.cl.progress;  // a waiting unit re-reads before it spins again
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto shared = reinterpret_cast<uintptr_t>(s.u.shared);
  if (c.L.shared_bytes && a >= shared && a + bytes <= shared + c.L.shared_bytes) {
    check_shared(c, s, a - shared, bytes, how, file, line);
    return true;
  }
  if (c.L.shared_bytes && c.cl.cubes.size() > 1)
    for (Cube* o : c.cl.cubes) {
      const auto base = reinterpret_cast<uintptr_t>(o->m.shared.data());
      if (o == &c || a < base || a + bytes > base + c.L.shared_bytes) continue;
      check_remote(*o, c, s, a - base, bytes, how, file, line);
      return true;
    }
  const auto scratch = reinterpret_cast<uintptr_t>(s.u.scratch);
  if (a >= scratch && a + bytes <= scratch + sizeof s.u.scratch) return true;
  if (in_allocation(a, bytes, c.w.ranges)) return true;
  c.report(s.linear,
           fmt::format("{}: error: out-of-bounds {} of global memory in {}: {} bytes at {:#x} are "
                       "outside every allocation of {}{}; the access was skipped (on a GPU: an "
                       "illegal-address error)",
                       at(file, line), access_words(how), c.where_in(s.linear), bytes, a,
                       c.L.device, nearest_allocation(a)));
  return false;
}

void api_out_of_bounds(uint32_t space, uint32_t how, uint64_t index, uint64_t count,
                       const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  c.report(
      s.linear,
      fmt::format("{}: error: out-of-bounds {} of a {} array in kernel '{}': line index {} is "
                  "not below {} (cube {}, unit {}); the access was skipped",
                  at(file, line), access_words(how), space == abi::kShared ? "shared" : "local",
                  c.L.kernel, index, count, c.cube, s.linear));
}

void api_misuse(const char* what, const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  c.report(s.linear, fmt::format("{}: error: {} in kernel '{}' (cube {}, unit {}); on a GPU the "
                                 "result is undefined",
                                 at(file, line), what, c.L.kernel, c.cube, s.linear));
}

// A unit waits for memory another unit writes (an mbarrier phase): the others run first. When
// whole passes of the scheduler go by with no progress, every unit still running is waiting
// like this one, and none will ever go on.
void api_spin(const char* what, const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  if (!c.L.fibers) {
    report_no_fibers(c, s, "a wait", file, line);
    return;
  }
  if (s.spin_progress != c.cl.progress) {
    s.spin_progress = c.cl.progress;
    s.idle_spins = 0;
  } else if (++s.idle_spins > 3) {
    c.report(s.linear, fmt::format("{}: error: {} in {}; the cube was stopped", at(file, line),
                                   what, c.where_in(s.linear)));
    c.cl.stop = true;
  }
  yield(s);
}

// Ordering by mbarrier phases (abi.h kOrderBegin and friends).
void api_order(const void* bar, uint32_t what, uint32_t parity) {
  Slot& s = here();
  Cube& c = *s.cube;
  if (what == abi::kRelease) ++c.cl.progress;  // a waiting unit looks again
  const uint32_t n = c.warp_count;
  if (what == abi::kOrderBegin) {
    if (c.by_phases) return;
    c.by_phases = true;
    c.clock.assign(size_t{n} * n, 0);
    for (uint32_t p = 0; p < n; ++p) c.clock_of(p)[p] = 1;
    c.phase_clocks.clear();
    const size_t need = size_t{c.L.shared_bytes} * n;
    if (c.m.read_clock.size() < need) c.m.read_clock.resize(need);
    return;
  }
  if (!c.by_phases) return;
  Cube::PhaseClocks& b = c.phase_clocks[bar];
  if (b.pending.empty()) {
    b.pending.assign(n, 0);
    b.done[0].assign(n, 0);
    b.done[1].assign(n, 0);
  }
  const uint32_t plane = s.linear >> 5;
  uint32_t* mine = c.clock_of(plane);
  switch (what) {
    case abi::kRelease:
      for (uint32_t p = 0; p < n; ++p) b.pending[p] = std::max(b.pending[p], mine[p]);
      ++mine[plane];
      break;
    case abi::kPhaseDone:
      b.done[parity & 1u] = b.pending;
      std::fill(b.pending.begin(), b.pending.end(), 0u);
      break;
    case abi::kAcquire:
      for (uint32_t p = 0; p < n; ++p) mine[p] = std::max(mine[p], b.done[parity & 1u][p]);
      break;
    default:
      break;
  }
}

// The unit leaves the cube: a barrier that waits only for it completes.
void api_retire() {
  Slot& s = here();
  Cube& c = *s.cube;
  if (s.retired) return;
  s.retired = true;
  ++c.retired;
  ++c.cl.progress;
  if (c.barrier_arrived > 0 && c.barrier_arrived == c.units - c.retired) complete_barrier(c);
}

// Every unit still in the cluster has arrived at its barrier: they go on, every cube's shared
// memory ordered as by a sync_cube, and across the cubes.
void complete_cluster_barrier(Cluster& cl) {
  for (Cube* c : cl.cubes) {
    for (uint32_t u = 0; u < c->units; ++u)
      if (c->slot(u).state == State::ClusterBarrier) c->slot(u).state = State::Ready;
    ++c->epoch;
  }
  cl.arrived = 0;
  ++cl.epoch;
}

void api_cluster_barrier(const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  Cluster& cl = c.cl;
  ++cl.progress;
  if (!c.L.fibers) {
    report_no_fibers(c, s, "a sync_cluster", file, line);
    return;
  }
  if (cl.arrived > 0 && (cl.line != line || !same_file(cl.file, file))) {
    c.report(s.linear,
             fmt::format("{}: error: units of a cluster are at different sync_clusters in kernel "
                         "'{}': unit {} of cube {} reached this one while others wait at the one "
                         "at {} (every unit of every cube of a cluster must reach the same "
                         "sync_cluster; the cluster was stopped)",
                         at(file, line), c.L.kernel, s.linear, c.cube, at(cl.file, cl.line)));
    cl.stop = true;
    s.state = State::ClusterBarrier;
    yield(s);
    return;
  }
  if (cl.arrived == 0) {
    cl.file = file;
    cl.line = line;
  }
  s.file = file;
  s.line = line;
  uint32_t live = 0;
  for (const Cube* o : cl.cubes) live += o->units - o->retired;
  if (++cl.arrived == live) {
    complete_cluster_barrier(cl);
    return;
  }
  s.state = State::ClusterBarrier;
  yield(s);
}

// The address of the byte at `p` of this cube's shared memory in the cube of rank `rank` of its
// cluster; null (reported) for a rank outside the cluster.
void* api_map_shared(const void* p, uint32_t rank, const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  const auto a = reinterpret_cast<const unsigned char*>(p);
  const unsigned char* base = c.m.shared.data();
  if (rank >= c.cl.cubes.size()) {
    c.report(s.linear, fmt::format("{}: error: {} names cube rank {} of its cluster, which has {} "
                                   "cube{} (ranks 0 to {}); the access was skipped",
                                   at(file, line), c.where_in(s.linear), rank, c.cl.cubes.size(),
                                   c.cl.cubes.size() == 1 ? "" : "s", c.cl.cubes.size() - 1));
    return nullptr;
  }
  if (a < base || a >= base + c.L.shared_bytes) {
    c.report(s.linear, fmt::format("{}: error: {} maps an address outside its shared memory to "
                                   "another cube of its cluster (an emulator bug; please report "
                                   "it)",
                                   at(file, line), c.where_in(s.linear)));
    return nullptr;
  }
  return c.cl.cubes[rank]->m.shared.data() + (a - base);
}

const Api g_api = {abi::kAbiVersion, api_current,       api_barrier,         api_collective,
                   api_access,       api_out_of_bounds, api_misuse,          api_spin,
                   api_order,        api_retire,        api_cluster_barrier, api_map_shared};

// Why no unit can go on: the first collective or barrier that cannot complete.
std::string unit_status(const Slot& o) {
  switch (o.state) {
    case State::Done:
      return "has returned";
    case State::Barrier:
      return fmt::format("waits at the sync_cube at {}", at(o.file, o.line));
    case State::ClusterBarrier:
      return fmt::format("waits at the sync_cluster at {}", at(o.file, o.line));
    case State::Collective:
      return fmt::format("waits at the plane operation at {}", at(o.file, o.line));
    default:
      return "is running";
  }
}

void diagnose(Cube& c) {
  auto status = [](const Slot& o) { return unit_status(o); };
  for (uint32_t warp = 0; warp < c.warp_count; ++warp) {
    for (const WarpOp& op : c.warps[warp]) {
      for (uint32_t l = 0; l < 32; ++l) {
        if (!(op.mask >> l & 1u) || (op.arrived >> l & 1u)) continue;
        const uint32_t u = warp * 32 + l;
        const std::string missing =
            u < c.units ? fmt::format("unit {} (lane {}) {}", u, l, status(c.slot(u)))
                        : fmt::format("lane {} does not exist (the cube has {} units)", l, c.units);
        c.report(u < c.units ? u : warp * 32 + op.first_lane,
                 fmt::format("{}: error: {} in kernel '{}' (cube {}, plane {}) never completed: "
                             "its mask {:#010x} includes lanes that do not reach it: {} (a plane "
                             "operation must be reached by every unit of the plane together: "
                             "plane-uniform control flow)",
                             at(op.file, op.line), collective_words(op.kind), c.L.kernel, c.cube,
                             warp, op.mask, missing));
        return;
      }
    }
  }
  for (uint32_t u = 0; u < c.units; ++u) {
    const Slot& o = c.slot(u);
    if (o.state == State::Barrier) continue;
    c.report(u, fmt::format("{}: error: the sync_cube in kernel '{}' (cube {}) never completed: "
                            "{} of {} units wait at it, but unit {} {} (every unit of a cube must "
                            "reach the same sync_cube the same number of times)",
                            at(c.barrier_file, c.barrier_line), c.L.kernel, c.cube,
                            c.barrier_arrived, c.units, u, status(o)));
    return;
  }
}

// Why no unit of the cluster can go on: a sync_cluster some units never reach, else each cube's
// first collective or barrier that cannot complete.
void diagnose_cluster(Cluster& cl) {
  if (cl.arrived > 0) {
    for (Cube* c : cl.cubes)
      for (uint32_t u = 0; u < c->units; ++u) {
        const Slot& o = c->slot(u);
        if (o.state == State::ClusterBarrier || o.retired) continue;
        c->report(u, fmt::format("{}: error: the sync_cluster in kernel '{}' never completed: {} "
                                 "of {} units of the cluster wait at it, but unit {} of cube {} "
                                 "{} (every unit of every cube of a cluster must reach the same "
                                 "sync_cluster the same number of times)",
                                 at(cl.file, cl.line), c->L.kernel, cl.arrived, cl.units, u,
                                 c->cube, unit_status(o)));
        return;
      }
  }
  for (Cube* c : cl.cubes) {
    bool blocked = false;
    for (uint32_t u = 0; u < c->units && !blocked; ++u)
      blocked = c->slot(u).state == State::Barrier || c->slot(u).state == State::Collective;
    if (blocked) diagnose(*c);
  }
}

// Prepares cube `cube` of the launch as rank `rank` of its cluster, its units in slots
// [first, first + units).
void start_cube(Cube& c, uint32_t cube, uint32_t rank, uint32_t first) {
  const Launch& L = c.L;
  Worker& w = c.w;
  CubeMem& m = c.m;
  c.cube = cube;
  c.rank = rank;
  c.first = first;
  c.units = L.cube_dim.x * L.cube_dim.y * L.cube_dim.z;
  c.warp_count = (c.units + 31) / 32;
  if (m.warps.size() < c.warp_count) m.warps.resize(c.warp_count);
  for (uint32_t i = 0; i < c.warp_count; ++i) m.warps[i].clear();
  c.warp_epoch.assign(c.warp_count, 1);
  if (m.shared.size() < L.shared_bytes) {
    m.shared.resize(L.shared_bytes);
    m.shadow.assign(L.shared_bytes, Shadow{});
    m.gen = 0;
  }
  if (++m.gen == 0) {  // wrapped: forget everything
    std::fill(m.shadow.begin(), m.shadow.end(), Shadow{});
    m.gen = 1;
  }
  if (m.tmem.empty()) m.tmem.resize(128 * 512);
  m.tmem_state = abi::TmemState{};
  const Dim3 block{cube % L.cubes.x, (cube / L.cubes.x) % L.cubes.y,
                   cube / (L.cubes.x * L.cubes.y)};
  for (uint32_t u = 0; u < c.units; ++u) {
    Slot& s = w.slots[first + u];
    s.u.thread_idx = {u % L.cube_dim.x, (u / L.cube_dim.x) % L.cube_dim.y,
                      u / (L.cube_dim.x * L.cube_dim.y)};
    s.u.block_idx = block;
    s.u.block_dim = L.cube_dim;
    s.u.grid_dim = L.cubes;
    s.u.cluster_rank = rank;
    s.u.shared = m.shared.data();
    s.u.tmem = m.tmem.data();
    s.u.tmem_state = &m.tmem_state;
    s.state = State::Ready;
    s.spin_progress = 0;
    s.idle_spins = 0;
    s.retired = false;
    s.linear = u;
    s.global = first + u;
    s.cube = &c;
  }
}

// What a cube leaves undone at its end.
void check_cube_end(Cube& c) {
  const abi::TmemState& t = c.m.tmem_state;
  if (!c.fault && t.bulk_issued > t.bulk_waited)
    c.report(0, fmt::format("{}: error: cube {} of kernel '{}' ends with an asynchronous TMA "
                            "store (the last one issued here) still reading shared memory; "
                            "tma_store_wait(0) before the end of the kernel",
                            at(t.bulk_file, t.bulk_line), c.cube, c.L.kernel));
  if (!c.fault && t.allocated)
    c.report(0, fmt::format("{}: error: tensor memory is still allocated when cube {} of kernel "
                            "'{}' ends (on a GPU the next cube on that SM waits for it forever); "
                            "tmem_free() every allocation before the kernel returns",
                            at(t.file, t.line), c.cube, c.L.kernel));
}

// Runs cluster `cluster` (linear over the grid of clusters, x fastest): its cubes' units as
// fibers of one scheduler, rank after rank. The first fault by (cube, unit).
std::optional<Fault> run_cluster(const Launch& L, Worker& w, uint32_t cluster) {
  const Dim3 d = L.cluster_dim;
  const uint32_t size = d.x * d.y * d.z;
  const uint32_t ncx = L.cubes.x / d.x, ncy = L.cubes.y / d.y;
  const uint32_t x0 = cluster % ncx * d.x, y0 = cluster / ncx % ncy * d.y,
                 z0 = cluster / (ncx * ncy) * d.z;
  const uint32_t units = L.cube_dim.x * L.cube_dim.y * L.cube_dim.z;
  if (w.mem.size() < size) w.mem.resize(size);
  if (w.slots.size() < size_t{units} * size) w.slots.resize(size_t{units} * size);
  Cluster cl;
  cl.units = units * size;
  std::vector<std::unique_ptr<Cube>> cubes;
  for (uint32_t r = 0; r < size; ++r) {
    const uint32_t x = x0 + r % d.x, y = y0 + r / d.x % d.y, z = z0 + r / (d.x * d.y);
    cubes.push_back(std::make_unique<Cube>(L, w, cl, w.mem[r]));
    start_cube(*cubes.back(), x + y * L.cubes.x + z * L.cubes.x * L.cubes.y, r, r * units);
    cl.cubes.push_back(cubes.back().get());
  }
  auto first_fault = [&]() -> std::optional<Fault> {
    std::optional<Fault> f;
    for (auto& c : cubes)
      if (c->fault && (!f || c->fault->cube < f->cube)) f = std::move(c->fault);
    return f;
  };
  if (!L.fibers) {
    // The units run one after another on a stack of the engine's (so that they find their
    // slot as fibers do), in one switch from the thread's own stack and back.
    Cube& c = *cubes[0];
    if (!w.plain.stack && !fiber_map(w.plain))
      return Fault{c.cube, 0,
                   fmt::format("{}: cannot map a stack for kernel '{}': {}", L.device, L.kernel,
                               std::strerror(errno))};
    fiber_start(w.plain, plain_main, &c);
    fiber_enter_from_main(w.main);
    fiber_switch(w.main, w.plain);
  } else {
    for (uint32_t g = 0; g < cl.units; ++g) {
      Slot& s = w.slots[g];
      if (!s.fiber.stack && !fiber_map(s.fiber)) {
        return Fault{s.cube->cube, s.linear,
                     fmt::format("{}: cannot map a stack for unit {} of kernel '{}': {}", L.device,
                                 s.linear, L.kernel, std::strerror(errno))};
      }
      fiber_start(s.fiber, fiber_main, &s);
      stack_slot(s.fiber.stack) = &s;
    }
    // Each pass starts at the first ready unit; the units hand the thread on in order (yield)
    // and the last one of the pass comes back here.
    for (;;) {
      Slot* first = nullptr;
      bool done = true;
      for (uint32_t g = 0; g < cl.units && !first; ++g) {
        Slot& s = w.slots[g];
        done = done && s.state == State::Done;
        if (s.state == State::Ready) first = &s;
      }
      if (done) break;
      if (!first) {
        diagnose_cluster(cl);
        break;
      }
      fiber_enter_from_main(w.main);
      fiber_switch(w.main, first->fiber);
      if (cl.stop) break;
    }
  }
  for (auto& c : cubes) check_cube_end(*c);
  return first_fault();
}

}  // namespace

// ---- modules ------------------------------------------------------------------------------------

Module::~Module() {
  if (handle) ::dlclose(handle);
  if (fd >= 0) ::close(fd);
}

Result<std::shared_ptr<Module>> load_module(const std::vector<char>& image,
                                            const std::string& kernel) {
  // The image goes to an anonymous memory file, which dlopen reads through /proc: nothing is
  // left on disk. The file stays open while the module is loaded, so that no other module gets
  // its /proc name (dlopen would take it for the same library). Where memory files are
  // missing, a temporary file, removed once loaded.
  std::string path;
  int fd = ::memfd_create(fmt::format("kiln-emu-{}", kernel).c_str(), MFD_CLOEXEC);
  bool temporary = false;
  if (fd >= 0) {
    path = fmt::format("/proc/self/fd/{}", fd);
  } else {
    const char* tmp = std::getenv("TMPDIR");
    // Named with the pid, like the compiler's folders, so that one left by a killed process
    // is removed by the next compile (compiler/cuda/emu/backend.cpp).
    std::string templ =
        fmt::format("{}/kiln-emu-{}-XXXXXX.so", tmp && *tmp ? tmp : "/tmp", ::getpid());
    fd = ::mkstemps(templ.data(), 3);
    if (fd < 0)
      return Error(ErrorKind::Io, fmt::format("cuda-emu: cannot create a file for kernel '{}': {}",
                                              kernel, std::strerror(errno)));
    path = templ;
    temporary = true;
  }
  size_t done = 0;
  while (done < image.size()) {
    const ssize_t n = ::write(fd, image.data() + done, image.size() - done);
    if (n <= 0) {
      ::close(fd);
      if (temporary) ::unlink(path.c_str());
      return Error(ErrorKind::Io, fmt::format("cuda-emu: writing kernel '{}' for loading: {}",
                                              kernel, std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* why = h ? nullptr : ::dlerror();
  auto m = std::make_shared<Module>();
  if (temporary) {
    ::close(fd);
    ::unlink(path.c_str());
  } else {
    m->fd = fd;
  }
  if (!h)
    return Error(ErrorKind::Device,
                 fmt::format("cuda-emu: loading kernel '{}': {}", kernel, why ? why : "?"));
  m->handle = h;
  auto abi_fn = reinterpret_cast<uint32_t (*)()>(::dlsym(h, "kiln_emu_abi"));
  auto bind = reinterpret_cast<void (*)(const Api*)>(::dlsym(h, "kiln_emu_bind"));
  m->unit = reinterpret_cast<void (*)(const void*)>(::dlsym(h, "kiln_emu_unit"));
  if (!abi_fn || !bind || !m->unit || abi_fn() != abi::kAbiVersion)
    return Error(ErrorKind::Device,
                 fmt::format("cuda-emu: kernel '{}' was built for another version of the "
                             "emulator (clear the disk cache: kiln cache clear)",
                             kernel));
  bind(&g_api);
  return m;
}

// ---- memory -------------------------------------------------------------------------------------

void* allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p) return nullptr;
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void release(void* p) {
  if (!p) return;
  Registry& r = registry();
  {
    std::unique_lock lock(r.mu);
    r.blocks.erase(reinterpret_cast<uintptr_t>(p));
    r.version.fetch_add(1, std::memory_order_acq_rel);
  }
  std::free(p);
}

// ---- launches -----------------------------------------------------------------------------------

std::optional<Fault> run(const Launch& L) {
  const uint64_t cubes = uint64_t{L.cubes.x} * L.cubes.y * L.cubes.z;
  if (cubes == 0) return std::nullopt;
  const uint32_t size = L.cluster_dim.x * L.cluster_dim.y * L.cluster_dim.z;
  std::mutex mu;
  std::optional<Fault> first;
  ThreadPool& pool = ThreadPool::global();
  const uint32_t n = static_cast<uint32_t>(cubes / size);  // clusters
  const uint32_t chunk = std::max<uint32_t>(1, n / (static_cast<uint32_t>(pool.threads()) * 8));
  pool.parallel_for(n, chunk, [&](uint32_t begin, uint32_t end) {
    Worker& w = worker();
    for (uint32_t cluster = begin; cluster < end; ++cluster) {
      auto f = run_cluster(L, w, cluster);
      if (!f) continue;
      std::lock_guard lock(mu);
      if (!first || f->cube < first->cube) first = std::move(f);
    }
  });
  return first;
}

}  // namespace kiln::detail::emu
