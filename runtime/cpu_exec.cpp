// Argument packing and parallel execution of compiled CPU kernels.
#include "runtime/cpu_exec.h"

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

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

TensorView::TensorView(void* d, std::span<const int64_t> shp, std::span<const int64_t> str)
    : data(d), rank(static_cast<int>(std::min<size_t>(shp.size(), kMaxRank + 1))) {
  // A rank above kMaxRank is kept as kMaxRank + 1 so that packing reports it.
  for (int i = 0; i < std::min(rank, kMaxRank); ++i) shape[i] = shp[static_cast<size_t>(i)];
  if (str.empty()) {
    int64_t s = 1;
    for (int i = std::min(rank, kMaxRank); i-- > 0;) {
      strides[i] = s;
      s *= shape[i];
    }
  } else {
    for (int i = 0; i < std::min(rank, kMaxRank) && i < static_cast<int>(str.size()); ++i)
      strides[i] = str[static_cast<size_t>(i)];
    if (str.size() != shp.size()) rank = -1;  // mismatched strides: reported when packing
  }
}

namespace {

constexpr uint64_t kMaxIndex = 0xffffffffu;  // IR indices, shapes and strides are u32

// The index width is a limit of the IR, named as such (docs/ir.md, "Index width").
std::string index_width_message(uint64_t lines, int lanes) {
  return fmt::format(
      "it spans {} lines of {}, more than kiln's 32-bit line indices reach (2^32 - 1; "
      "docs/ir.md, \"Index width\"); launch on a slice of at most 2^32 - 1 lines, or read it in "
      "wider lines",
      lines, lanes);
}

const char* kind_words(const ir::Type& t) {
  switch (t.kind) {
    case ir::TypeKind::Tensor:
      return "a tensor";
    case ir::TypeKind::Array:
      return "an array";
    default:
      return "a scalar";
  }
}

Error arg_error(const abi::KernelInfo& info, const abi::ParamSlots& p, const std::string& what) {
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}', argument '{}': {}", info.name, p.name, what));
}

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

Status pack_args_into(const abi::KernelInfo& info, const std::array<uint32_t, 3>& cube_count,
                      std::span<const HostArg> args, std::span<uint64_t> slots) {
  if (slots.size() < info.layout.slot_count)
    return Error(ErrorKind::Unsupported, fmt::format("kernel '{}' needs {} argument slots",
                                                     info.name, info.layout.slot_count));
  const auto& params = info.layout.params;
  if (args.size() != params.size())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}' takes {} argument{}, got {}", info.name, params.size(),
                             params.size() == 1 ? "" : "s", args.size()));
  for (int d = 0; d < 3; ++d)
    if (cube_count[d] == 0)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("kernel '{}': cube count {}x{}x{} has a zero dimension", info.name,
                               cube_count[0], cube_count[1], cube_count[2]));
  if (uint64_t{cube_count[0]} * cube_count[1] * cube_count[2] > kMaxIndex)
    return Error(ErrorKind::InvalidArgument, fmt::format("kernel '{}': too many cubes", info.name));
  const auto& cl = info.cluster_dim;
  for (int d = 0; d < 3; ++d)
    if (cube_count[d] % cl[d] != 0)
      return Error(
          ErrorKind::InvalidArgument,
          fmt::format("kernel '{}': cube count {}x{}x{} is not a whole number of its "
                      "{}x{}x{} clusters; launch a multiple of the cluster shape in "
                      "each dimension",
                      info.name, cube_count[0], cube_count[1], cube_count[2], cl[0], cl[1], cl[2]));
  slots[0] = cube_count[0];
  slots[1] = cube_count[1];
  slots[2] = cube_count[2];
  for (size_t i = 0; i < params.size(); ++i) {
    const abi::ParamSlots& p = params[i];
    const ir::Type& t = p.type;
    const uint32_t s = p.first;
    const int lanes = t.lanes;
    const size_t esize = static_cast<size_t>(ir::elem_bytes(t.elem));
    if (t.kind == ir::TypeKind::Tensor) {
      const auto* v = std::get_if<TensorView>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      if (v->rank < 0)
        return arg_error(info, p, "the shape and the strides have different lengths");
      if (v->rank != t.rank)
        return arg_error(info, p,
                         fmt::format("the kernel was specialized for rank {}, got a tensor "
                                     "of rank {}",
                                     t.rank, v->rank));
      if (!v->data) return arg_error(info, p, "null data pointer");
      uint64_t elements = 1;
      for (int d = 0; d < t.rank; ++d) {
        if (v->shape[d] < 0 || v->strides[d] < 0)
          return arg_error(info, p, "negative shapes and strides are not supported");
        if (static_cast<uint64_t>(v->shape[d]) > kMaxIndex ||
            static_cast<uint64_t>(v->strides[d]) > kMaxIndex)
          return arg_error(info, p, "a dimension or stride does not fit in 32 bits");
        elements *= static_cast<uint64_t>(v->shape[d]);
      }
      if (lanes > 1) {
        const int last = t.rank - 1;
        if (v->shape[last] % lanes != 0 || (v->shape[last] > 1 && v->strides[last] != 1))
          return arg_error(info, p,
                           fmt::format("line width {} needs a contiguous innermost "
                                       "dimension whose size is a multiple of {} (shape[{}] "
                                       "= {}, stride {})",
                                       lanes, lanes, last, v->shape[last], v->strides[last]));
        for (int d = 0; d < last; ++d)
          if (v->strides[d] % lanes != 0)
            return arg_error(info, p,
                             fmt::format("line width {} needs outer strides that are "
                                         "multiples of {} (stride[{}] = {})",
                                         lanes, lanes, d, v->strides[d]));
      }
      if (reinterpret_cast<uintptr_t>(v->data) % esize != 0)
        return arg_error(info, p,
                         fmt::format("data is not aligned to its element size ({} bytes)", esize));
      const uint64_t lines = elements / static_cast<uint64_t>(lanes);
      // The view's footprint: 1 + the last element it reaches, in lines (0 when empty).
      uint64_t last = 0;
      for (int d = 0; d < t.rank; ++d)
        last += static_cast<uint64_t>(std::max<int64_t>(v->shape[d] - 1, 0)) *
                static_cast<uint64_t>(v->strides[d]);
      const uint64_t extent = elements == 0 ? 0 : last / static_cast<uint64_t>(lanes) + 1;
      if (lines > kMaxIndex || extent > kMaxIndex)
        return arg_error(info, p, index_width_message(std::max(lines, extent), lanes));
      slots[s + abi::slot::kData] = reinterpret_cast<uint64_t>(v->data);
      slots[s + abi::slot::kLen] = lines;
      slots[s + abi::slot::kExtent] = extent;
      const uint32_t rank = static_cast<uint32_t>(t.rank);
      for (uint32_t d = 0; d < rank; ++d) {
        slots[s + abi::slot::shape(d)] = static_cast<uint64_t>(v->shape[d]);
        slots[s + abi::slot::stride(rank, d)] = static_cast<uint64_t>(v->strides[d]);
      }
    } else if (t.kind == ir::TypeKind::Array) {
      const auto* v = std::get_if<ArrayView>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      if (!v->data && v->elements) return arg_error(info, p, "null data pointer");
      if (v->elements % static_cast<uint64_t>(lanes) != 0)
        return arg_error(
            info, p,
            fmt::format("{} elements are not a whole number of lines of {}", v->elements, lanes));
      if (v->elements / static_cast<uint64_t>(lanes) > kMaxIndex)
        return arg_error(info, p,
                         index_width_message(v->elements / static_cast<uint64_t>(lanes), lanes));
      slots[s + abi::slot::kData] = reinterpret_cast<uint64_t>(v->data);
      slots[s + abi::slot::kLen] = v->elements / static_cast<uint64_t>(lanes);
    } else {
      const auto* v = std::get_if<ScalarBits>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      slots[s + abi::slot::kData] = v->bits;
    }
  }
  if (!info.tensor_maps.empty()) KILN_TRY(check_tensor_maps(info, slots));
  return {};
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
