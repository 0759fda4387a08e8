// Parallel execution of compiled CPU kernels (runtime/cpu/exec.h).
#include "runtime/cpu/exec.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "runtime/fiber.h"
#include "runtime/tma.h"

namespace kiln {

namespace {

// A 64-byte aligned buffer per thread for the cubes' shared memory.
uint8_t* thread_arena(size_t bytes) {
  struct Arena {
    std::unique_ptr<uint8_t[]> mem;
    size_t size = 0;
  };
  static thread_local Arena arena;
  if (arena.size < bytes + 64) {
    arena.size = std::max<size_t>(bytes + 64, 4096);
    arena.mem.reset(new uint8_t[arena.size]);
  }
  auto p = reinterpret_cast<uintptr_t>(arena.mem.get());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

// ---- clusters ---------------------------------------------------------------------------------
// The cubes of a cluster run on one thread as fibers, each calling the entry for its cube with an
// arena of its own, in rank order; they switch at sync_cluster (cpu::ClusterHooks::sync) and at
// mbarrier waits another cube completes (wait), round robin. A sync_cluster completes when every
// cube has arrived; when no cube can go on (one returned before a sync_cluster the others wait
// at, or all wait for phases nothing will complete), the cluster is broken: every wait and sync
// fails at once (the kernel reports the misuse at its line) and the cubes run to their end.
namespace fib = detail::fiber;

CpuRunReport launch_report(const abi::KernelInfo& info, abi::LaunchState& state);

// What a thread keeps between clusters: the cubes' stacks (mapped once) and arenas.
struct ClusterStacks {
  std::vector<fib::Fiber> fibers;
  fib::Fiber main;
  std::vector<uint8_t> memory;
  ~ClusterStacks() {
    for (fib::Fiber& f : fibers)
      if (f.stack) fib::fiber_unmap(f);
  }
};
ClusterStacks& cluster_stacks() {
  thread_local ClusterStacks s;
  return s;
}

class ClusterRun {
 public:
  ClusterRun(const cpu::CompiledKernel& k, const uint64_t* packed, abi::LaunchState* state)
      : info_(k.info()), entry_(k.entry()), packed_(packed), state_(state) {
    const auto& d = info_.cluster_dim;
    size_ = d[0] * d[1] * d[2];
    hooks_.ctx = this;
    hooks_.size = size_;
    hooks_.shared = [](void* c, uint32_t r) { return static_cast<ClusterRun*>(c)->arenas_[r]; };
    hooks_.sync = [](void* c) { return static_cast<ClusterRun*>(c)->sync(); };
    hooks_.wait = [](void* c) { return static_cast<ClusterRun*>(c)->wait(); };
  }
  // Runs cluster `cluster` (linear, x fastest, over the grid of clusters); false when no stack
  // could be mapped.
  bool run(uint32_t cluster) {
    const uint32_t gx = static_cast<uint32_t>(packed_[0]), gy = static_cast<uint32_t>(packed_[1]);
    const auto& d = info_.cluster_dim;
    const uint32_t ncx = gx / d[0], ncy = gy / d[1];
    const uint32_t x0 = cluster % ncx * d[0], y0 = cluster / ncx % ncy * d[1],
                   z0 = cluster / (ncx * ncy) * d[2];
    ClusterStacks& st = cluster_stacks();
    if (cubes_.size() < size_) cubes_.resize(size_);
    if (st.fibers.size() < size_) st.fibers.resize(size_);
    arenas_.resize(size_);
    const size_t bytes = (info_.shared_bytes + 63) / 64 * 64;
    if (st.memory.size() < bytes * size_ + 64) st.memory.assign(bytes * size_ + 64, 0);
    const auto base = (reinterpret_cast<uintptr_t>(st.memory.data()) + 63) & ~uintptr_t{63};
    main_ = &st.main;
    for (uint32_t r = 0; r < size_; ++r) {
      Cube& c = cubes_[r];
      c.fiber = &st.fibers[r];
      if (!c.fiber->stack && !fib::fiber_map(*c.fiber)) return false;
      const uint32_t x = x0 + r % d[0], y = y0 + r / d[0] % d[1], z = z0 + r / (d[0] * d[1]);
      c.linear = x + y * gx + z * gx * gy;
      c.state = State::Running;
      c.last_progress = 0;
      c.idle = 0;
      // Zeroed, so that an mbarrier another cube's copy completes on before this cube
      // initialized it is found (kiln_rt_tma_load's check), whatever ran here before.
      arenas_[r] = reinterpret_cast<uint8_t*>(base + r * bytes);
      std::memset(arenas_[r], 0, bytes);
      fib::fiber_start(*c.fiber, &ClusterRun::cube_main, this);
    }
    arrived_ = 0;
    broken_ = false;
    current_ = 0;
    hooks_.progress = 1;
    cpu::ClusterHooks*& h = cpu::cluster_hooks();
    cpu::ClusterHooks* outer = h;
    h = &hooks_;
    fib::fiber_enter_from_main(*main_);
    fib::fiber_switch(*main_, *cubes_[0].fiber);
    h = outer;
    return true;
  }

 private:
  enum class State : uint8_t { Running, AtSync, Done };
  struct Cube {
    fib::Fiber* fiber = nullptr;  // the thread's (ClusterStacks)
    uint32_t linear = 0;
    State state = State::Running;
    uint64_t last_progress = 0;
    uint32_t idle = 0;
  };

  static void cube_main(void* arg) {
    auto& self = *static_cast<ClusterRun*>(arg);
    const uint32_t r = self.current_;
    Cube& c = self.cubes_[r];
    fib::fiber_arrived(*c.fiber);
    self.hooks_.rank = r;
    self.entry_(self.packed_, c.linear, c.linear + 1, self.arenas_[r], self.state_);
    c.state = State::Done;
    ++self.hooks_.progress;
    self.switch_from(r, /*finished=*/true);
    KILN_CHECK(false, "a finished cube of a cluster was resumed");
  }

  // The next cube after `from` that can run (`from` itself last), or size_ for none.
  uint32_t next_runnable(uint32_t from) const {
    for (uint32_t i = 1; i <= size_; ++i) {
      const uint32_t r = (from + i) % size_;
      if (cubes_[r].state == State::Running) return r;
    }
    return size_;
  }

  // Hands the thread from cube `from` to the next one that can run: when none can, the cubes
  // at a sync_cluster are released broken, or (all done) the scheduler resumes.
  void switch_from(uint32_t from, bool finished) {
    uint32_t to = next_runnable(from);
    if (to == size_) {
      bool waiting = false;
      for (Cube& c : cubes_)
        if (c.state == State::AtSync) {
          c.state = State::Running;
          waiting = true;
        }
      if (waiting) {
        broken_ = true;
        to = next_runnable(from);
      }
    }
    if (to == from && !finished) return;
    current_ = to == size_ ? current_ : to;
    if (to != size_) hooks_.rank = to;
    fib::fiber_switch(*cubes_[from].fiber, to == size_ ? *main_ : *cubes_[to].fiber, finished);
    hooks_.rank = from;
    current_ = from;
  }

  bool sync() {
    if (broken_) return false;
    const uint32_t me = current_;
    ++hooks_.progress;
    if (++arrived_ == size_) {  // the last to arrive releases the others
      arrived_ = 0;
      for (Cube& c : cubes_)
        if (c.state == State::AtSync) c.state = State::Running;
      return true;
    }
    cubes_[me].state = State::AtSync;
    switch_from(me, false);
    return !broken_;
  }

  bool wait() {
    if (broken_) return false;
    const uint32_t me = current_;
    Cube& c = cubes_[me];
    if (c.last_progress != hooks_.progress) {
      c.last_progress = hooks_.progress;
      c.idle = 0;
    } else if (++c.idle > 3) {  // three rounds of the others and nothing moved
      broken_ = true;
      for (Cube& o : cubes_)
        if (o.state == State::AtSync) o.state = State::Running;
      return false;
    }
    switch_from(me, false);
    return !broken_;
  }

  const abi::KernelInfo& info_;
  cpu::EntryFn entry_;
  const uint64_t* packed_;
  abi::LaunchState* state_;
  uint32_t size_ = 1, arrived_ = 0, current_ = 0;
  bool broken_ = false;
  cpu::ClusterHooks hooks_{};
  fib::Fiber* main_ = nullptr;
  std::vector<Cube> cubes_;
  std::vector<uint8_t*> arenas_;
};

}  // namespace

Result<std::vector<uint64_t>> pack_cpu_args(const cpu::CompiledKernel& k,
                                            const std::array<uint32_t, 3>& cube_count,
                                            std::span<const HostArg> args) {
  std::vector<uint64_t> slots(k.info().layout.slot_count, 0);
  KILN_TRY(pack_cpu_args_into(k, cube_count, args, slots));
  return slots;
}

Status pack_cpu_args_into(const cpu::CompiledKernel& k, const std::array<uint32_t, 3>& cube_count,
                          std::span<const HostArg> args, std::span<uint64_t> slots) {
  return pack_args_into(k.info(), cube_count, args, slots);
}

CpuRunReport run_cpu_packed(const cpu::CompiledKernel& k, const uint64_t* packed, uint32_t cubes,
                            ThreadPool* pool) {
  const abi::KernelInfo& info = k.info();
  const cpu::EntryFn entry = k.entry();
  abi::LaunchState state;
  const uint32_t units = info.cube_dim[0] * info.cube_dim[1] * info.cube_dim[2];
  if (!pool) pool = &ThreadPool::global();
  const uint32_t cluster = info.cluster_dim[0] * info.cluster_dim[1] * info.cluster_dim[2];
  if (cluster > 1) {
    // Each cluster on one thread, its cubes as fibers; clusters in parallel.
    const uint32_t clusters = cubes / cluster;
    std::atomic<bool> mapped{true};  // cleared by any worker that cannot map a stack
    auto run_clusters = [&](uint32_t b, uint32_t e) {
      ClusterRun run(k, packed, &state);
      for (uint32_t c = b; c < e; ++c)
        if (!run.run(c)) {
          mapped.store(false, std::memory_order_relaxed);
          return;
        }
    };
    if (clusters == 1 || uint64_t{cubes} * units < 256 || pool->threads() == 1)
      run_clusters(0, clusters);
    else
      pool->parallel_for(clusters, 1, run_clusters);
    if (!mapped.load(std::memory_order_relaxed)) {
      CpuRunReport r;
      r.fault = Error(ErrorKind::Device,
                      fmt::format("kernel '{}': cannot map a stack for a cube of a cluster: {}",
                                  info.name, std::strerror(errno)));
      return r;
    }
    return launch_report(info, state);
  }
  // Small launches run on the caller: waking workers would cost more than the work. The work
  // per unit is unknown (a unit may loop over a large block), so only a single cube or a
  // handful of units in all counts as small.
  if (cubes == 1 || uint64_t{cubes} * units < 256 || pool->threads() == 1) {
    entry(packed, 0, cubes, thread_arena(info.shared_bytes), &state);
  } else {
    const uint32_t chunk =
        std::max<uint32_t>(1, cubes / (static_cast<uint32_t>(pool->threads()) * 8));
    pool->parallel_for(cubes, chunk, [&](uint32_t b, uint32_t e) {
      entry(packed, b, e, thread_arena(info.shared_bytes), &state);
    });
  }
  return launch_report(info, state);
}

namespace {

CpuRunReport launch_report(const abi::KernelInfo& info, abi::LaunchState& state) {
  CpuRunReport report;
  if (!state.prints.empty()) report.prints = abi::format_prints(state, info.prints);
  // The first of the fault and the failed assert: the lower (cube, unit); at the same unit the
  // assert, which states what the kernel expected (checked mode's view checks are asserts
  // placed before the access they skip).
  const bool assert_first =
      state.assert_failed && (!state.fault || std::pair(state.assert_cube, state.assert_unit) <=
                                                  std::pair(state.fault_cube, state.fault_unit));
  if (state.fault && !assert_first) {
    const abi::AccessSite& site = info.accesses.at(state.fault_site);
    report.fault =
        Error(ErrorKind::KernelFault,
              fmt::format("{}: error: out-of-bounds {} of {} in kernel '{}': line index {} is "
                          "not below {} (cube {}, unit {}); the access was skipped",
                          site.where.empty() ? info.name : site.where, site.access, site.memory,
                          info.name, state.fault_index, state.fault_bound, state.fault_cube,
                          state.fault_unit));
  }
  if (assert_first) {
    const abi::AssertSite& site = info.asserts.at(state.assert_site);
    report.fault =
        Error(ErrorKind::KernelFault,
              fmt::format("{}: error: assertion failed in kernel '{}': {} (cube {}, unit {})",
                          site.where.empty() ? info.name : site.where, info.name, site.message,
                          state.assert_cube, state.assert_unit));
  }
  return report;
}

}  // namespace

Result<CpuRunReport> run_cpu(const cpu::CompiledKernel& k,
                             const std::array<uint32_t, 3>& cube_count,
                             std::span<const HostArg> args, ThreadPool* pool) {
  KILN_ASSIGN(auto packed, pack_cpu_args(k, cube_count, args));
  CpuRunReport r =
      run_cpu_packed(k, packed.data(), cube_count[0] * cube_count[1] * cube_count[2], pool);
  if (r.fault) return *r.fault;
  return r;
}

}  // namespace kiln
