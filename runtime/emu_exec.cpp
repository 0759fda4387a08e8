// The CUDA emulator's execution engine: fibers, the cube scheduler, barriers, warp collectives,
// memory checks and the shared-memory race detector (emu_exec.h).
#include "runtime/emu_exec.h"

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

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define KILN_EMU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KILN_EMU_ASAN)
#define KILN_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(KILN_EMU_TSAN)
#define KILN_EMU_TSAN 1
#endif
#if KILN_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if KILN_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace kiln::detail::emu {

using ::kiln::emu::Api;
using ::kiln::emu::Dim3;
using ::kiln::emu::Unit;
namespace abi = ::kiln::emu;

namespace {

// ---- fibers ---------------------------------------------------------------------------------
// A fiber is a stack and a saved stack pointer. On x86-64 the switch saves the callee-saved
// registers on the old stack and restores them from the new one (a few nanoseconds, no system
// call); the floating-point control words are the thread's, which no kernel changes. Elsewhere
// ucontext does the same, slower.

constexpr size_t kStackBytes = 256 * 1024;
// Every unit runs on a stack of kStackBytes aligned to kStackBytes, whose top kHeaderBytes
// hold the running unit's Slot: the engine's entry points find the unit from their own frame
// address (no thread-local lookup on every threadIdx and every access).
constexpr size_t kHeaderBytes = 64;

struct Fiber {
  char* stack = nullptr;  // kStackBytes, with a guard page below
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
#if KILN_EMU_ASAN
  void* fake_stack = nullptr;  // ASan's fake frames of this fiber while it is suspended
  const void* bottom = nullptr;
  size_t size = 0;
#endif
#if KILN_EMU_TSAN
  void* tsan = nullptr;
#endif
};

#if defined(__x86_64__)
extern "C" void kiln_emu_switch(void** save_sp, void* to_sp);
extern "C" void kiln_emu_fiber_entry();
asm(R"(
  .text
  .globl kiln_emu_switch
  .hidden kiln_emu_switch
  .type kiln_emu_switch, @function
kiln_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_emu_switch, .-kiln_emu_switch

  .globl kiln_emu_fiber_entry
  .hidden kiln_emu_fiber_entry
  .type kiln_emu_fiber_entry, @function
kiln_emu_fiber_entry:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size kiln_emu_fiber_entry, .-kiln_emu_fiber_entry
)");

// Lays out a new fiber's stack as kiln_emu_switch leaves a suspended one: it resumes in
// kiln_emu_fiber_entry, which calls fn(arg) with the stack aligned as after a call.
void fiber_start(Fiber& f, void (*fn)(void*), void* arg) {
  auto* s = reinterpret_cast<uint64_t*>(
      reinterpret_cast<uintptr_t>(f.stack + kStackBytes - kHeaderBytes) & ~uintptr_t{15});
  *--s = reinterpret_cast<uint64_t>(&kiln_emu_fiber_entry);
  *--s = 0;                                // rbp
  *--s = reinterpret_cast<uint64_t>(arg);  // rbx
  *--s = reinterpret_cast<uint64_t>(fn);   // r12
  *--s = 0;                                // r13
  *--s = 0;                                // r14
  *--s = 0;                                // r15
  f.sp = s;
}
void raw_switch(Fiber& from, Fiber& to) {
  kiln_emu_switch(&from.sp, to.sp);
}
#else
thread_local void (*t_start_fn)(void*) = nullptr;
thread_local void* t_start_arg = nullptr;
void fiber_trampoline() {
  t_start_fn(t_start_arg);
}
void fiber_start(Fiber& f, void (*fn)(void*), void* arg) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes - kHeaderBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_trampoline, 0);
  // The arguments reach the trampoline through thread-locals, set just before its first run.
  t_start_fn = fn;
  t_start_arg = arg;
}
void raw_switch(Fiber& from, Fiber& to) {
  swapcontext(&from.ctx, &to.ctx);
}
#endif

// Sanitizers follow the switches through their fiber interfaces: ASan moves its idea of the
// current stack (or it reports the fibers' frames as overflows), TSan keeps a clock per fiber.
// The thread's own stack, the scheduler's, is learnt by the first fiber it switches to.
#if KILN_EMU_ASAN
thread_local bool t_leaving_main = false;
thread_local Fiber* t_main = nullptr;
#endif

// Called first thing on a fiber's stack each time it (or the scheduler) runs again.
void fiber_arrived([[maybe_unused]] Fiber& self) {
#if KILN_EMU_ASAN
  const void* from_bottom = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(self.fake_stack, &from_bottom, &from_size);
  if (t_leaving_main) {
    t_leaving_main = false;
    t_main->bottom = from_bottom;
    t_main->size = from_size;
  }
#endif
}

// Switches from the running fiber to another; `finished`: `from` never runs again.
void fiber_switch(Fiber& from, Fiber& to, [[maybe_unused]] bool finished = false) {
#if KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &from.fake_stack, to.bottom, to.size);
#endif
#if KILN_EMU_TSAN
  __tsan_switch_to_fiber(to.tsan, 0);
#endif
  raw_switch(from, to);
  fiber_arrived(from);
}

// Called by the scheduler (on the thread's stack) before it runs fibers.
void fiber_enter_from_main([[maybe_unused]] Fiber& main) {
#if KILN_EMU_ASAN
  t_leaving_main = true;
  t_main = &main;
#endif
#if KILN_EMU_TSAN
  main.tsan = __tsan_get_current_fiber();
#endif
}

// A stack aligned to kStackBytes with a guard page below it: an overflow faults instead of
// corrupting. Mapped at twice the size, then trimmed to the aligned part.
char* map_stack() {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t span = 2 * kStackBytes + page;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t stack = (start + page + kStackBytes - 1) & ~uintptr_t{kStackBytes - 1};
  const uintptr_t end = start + span;
  if (stack - page > start) ::munmap(p, stack - page - start);
  if (stack + kStackBytes < end)
    ::munmap(reinterpret_cast<void*>(stack + kStackBytes), end - stack - kStackBytes);
  ::mprotect(reinterpret_cast<void*>(stack - page), page, PROT_NONE);
  return reinterpret_cast<char*>(stack);
}
void unmap_stack(char* stack) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ::munmap(stack - page, kStackBytes + page);
}

// Gives a fiber its stack (and the sanitizers' records of it); false when none can be mapped.
bool fiber_map(Fiber& f) {
  f.stack = map_stack();
  if (!f.stack) return false;
#if KILN_EMU_ASAN
  f.bottom = f.stack;
  f.size = kStackBytes;
#endif
#if KILN_EMU_TSAN
  f.tsan = __tsan_create_fiber(0);
#endif
  return true;
}
void fiber_unmap(Fiber& f) {
  unmap_stack(f.stack);
#if KILN_EMU_TSAN
  __tsan_destroy_fiber(f.tsan);
#endif
}

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

// The allocations this thread hit last (a kernel reads and writes a few tensors over and over).
struct RangeCache {
  static constexpr int kWays = 4;
  uintptr_t lo[kWays] = {}, hi[kWays] = {};
  uint64_t version = 0;
  int next = 0;
};
struct Cube;
struct Slot;

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

// ---- cubes ----------------------------------------------------------------------------------

enum class State : uint8_t { Ready, Barrier, Collective, Done };

struct Slot {
  Unit u{};
  Cube* cube = nullptr;  // the cube it runs in
  Fiber fiber;
  State state = State::Ready;
  uint32_t linear = 0;
  const char* file = nullptr;  // where it waits
  uint32_t line = 0;
  uint64_t value = 0, result = 0;  // its part in the collective it waits at
  uint32_t operand = 0;
  uint64_t spin_progress = 0;  // the cube's progress when it last spun, and spins since then
  uint32_t idle_spins = 0;
  bool retired = false;  // left the cube (a pipeline's producer plane): barriers go on without it
};

// A collective some lanes of a warp wait at: its site, kind and mask. Several can wait at
// once (lanes 0-15 at a reduction over their half while 16-31 wait at a full-warp shuffle).
struct WarpOp {
  uint32_t kind = 0, mask = 0, arrived = 0, first_lane = 0;
  const char* file = nullptr;
  uint32_t line = 0;
};

// Per byte of shared memory: the last write and the readers since, for the race detector.
struct Shadow {
  uint32_t gen = 0;    // the cube generation of the last write (another: never written here)
  uint32_t epoch = 0;  // the barrier phase of the last write
  uint32_t warp_epoch = 0;
  uint16_t writer = 0;  // unit + 1; kAtomicWriter after atomics
  uint16_t reader = 0;  // unit + 1 of the phase's reader; kSeveral for more than one
  uint32_t read_gen = 0, read_epoch = 0, read_warp_epoch = 0;
  // The last tcgen05 multiply that read it (TmemState's count), while a GPU may still run it,
  // and the last asynchronous TMA store that read it (its bulk group).
  uint32_t async_gen = 0, async_mma = 0;
  uint32_t bulk_gen = 0, bulk_group = 0;
  const char* file = nullptr;  // the write
  uint32_t line = 0;
  // Ordering by mbarrier phases (Cube::by_phases): the writer plane's clock at the write, and
  // the planes with a read of it since the last sync_cube (their ReadClocks).
  uint32_t wclock = 0;
  uint32_t read_planes = 0;
};
constexpr uint16_t kAtomicWriter = 0xffff, kSeveral = 0xffff;

// A plane's latest read of a byte of shared memory, when ordering by mbarrier phases: its
// clock, the plane's sync_plane count then, and the reading unit + 1 (kSeveral: more than one
// unit of the plane since its last sync_plane).
struct ReadClock {
  uint32_t clock = 0, warp_epoch = 0;
  uint16_t reader = 0;
};

// What a host thread keeps between cubes: fiber stacks, the shared arena and its shadow.
struct Worker {
  std::vector<Slot> slots;
  std::vector<std::vector<WarpOp>> warps;  // kept between cubes for their capacity
  std::vector<unsigned char> shared;
  std::vector<Shadow> shadow;
  std::vector<ReadClock> read_clock;  // shared byte x plane, when ordering by mbarrier phases
  uint32_t gen = 0;
  Fiber main;
  Fiber plain;        // where the units of a kernel without barriers run, one after another
  RangeCache ranges;  // the allocations this thread's units hit last
  std::vector<uint32_t> tmem;  // the cube's tensor memory (tcgen05), 128 x 512 cells
  abi::TmemState tmem_state{};
  ~Worker() {
    for (Slot& s : slots)
      if (s.fiber.stack) fiber_unmap(s.fiber);
    if (plain.stack) fiber_unmap(plain);
  }
};
Worker& worker() {
  thread_local Worker w;
  return w;
}

const char* access_words(uint32_t how) {
  if (how & abi::kAtomic) return "atomic";
  return how & abi::kStore ? "store" : "load";
}

std::string at(const char* file, uint32_t line) {
  return fmt::format("{}:{}", file ? file : "(unknown)", line);
}

struct Cube {
  const Launch& L;
  Worker& w;
  uint32_t cube = 0, units = 0, warp_count = 0;
  uint32_t epoch = 0;  // completed barriers
  uint32_t barrier_arrived = 0;
  const char* barrier_file = nullptr;
  uint32_t barrier_line = 0;
  std::vector<std::vector<WarpOp>>& warps;  // the waiting collectives of each warp (Worker's)
  std::vector<uint32_t> warp_epoch;
  std::optional<Fault> fault;
  bool stop = false;  // abandon the cube (a barrier or collective can never complete)
  // Counts what lets a waiting unit go on: barriers, collectives, writes, units finishing.
  uint64_t progress = 0;
  uint32_t retired = 0;  // units that left the cube (Slot::retired)
  // Ordering by mbarrier phases, once a pipeline begins (abi kOrderBegin): its planes order
  // their shared-memory accesses by mbarrier phases as well as by barriers. A vector clock per
  // plane (row p: the clock of each plane that p has seen; p's own entry counts its
  // releases), and per mbarrier the clocks released into its current phase and those of its
  // last completed phase of each parity.
  struct PhaseClocks {
    std::vector<uint32_t> pending, done[2];
  };
  bool by_phases = false;
  std::vector<uint32_t> clock;
  std::unordered_map<const void*, PhaseClocks> phase_clocks;
  uint32_t* clock_of(uint32_t plane) { return &clock[size_t{plane} * warp_count]; }

  Cube(const Launch& l, Worker& wk) : L(l), w(wk), warps(wk.warps) {}

  void report(uint32_t unit, std::string message) {
    if (fault && fault->unit <= unit) return;
    fault = Fault{cube, unit, std::move(message)};
  }
  std::string where_in(uint32_t unit) const {
    return fmt::format("kernel '{}' (cube {}, unit {})", L.kernel, cube, unit);
  }
};

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
  if (!c.stop)
    for (uint32_t u = s.linear + 1; u < c.units; ++u) {
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
  ++s.cube->progress;
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
    if (c.w.slots[u].state == State::Barrier) c.w.slots[u].state = State::Ready;
  c.barrier_arrived = 0;
  ++c.epoch;
}

void api_barrier(const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  ++c.progress;
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
    c.stop = true;
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
    const auto v = static_cast<uint32_t>(c.w.slots[warp * 32 + l].value);
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
    Slot& o = c.w.slots[warp * 32 + l];
    if (op.kind == abi::kShuffle) {
      const uint32_t src = o.operand % 32u;
      if (!(op.mask >> src & 1u)) {
        c.report(o.linear, fmt::format("{}: error: a shuffle in {} reads lane {}, which is not in "
                                       "its mask {:#010x} (the value read is undefined on a GPU)",
                                       at(op.file, op.line), c.where_in(o.linear), src, op.mask));
        o.result = o.value;
      } else {
        o.result = c.w.slots[warp * 32 + src].value;
      }
    } else {
      o.result = reduced;
    }
  }
  if (op.kind == abi::kSyncWarp) ++c.warp_epoch[warp];
  for (uint32_t l = 0; l < 32; ++l)
    if (op.mask >> l & 1u) {
      Slot& o = c.w.slots[warp * 32 + l];
      if (o.state == State::Collective) o.state = State::Ready;
    }
}

uint64_t api_collective(uint32_t kind, uint32_t mask, uint64_t value, uint32_t operand,
                        const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  ++c.progress;
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

// Whether the unit that made an earlier access is ordered before this one: a sync_cube since,
// a sync_plane since in the same plane, or (ordering by mbarrier phases) a phase that the
// other unit's plane released after the access and this unit's plane has waited for.
bool ordered(Cube& c, uint32_t other_unit, uint32_t epoch, uint32_t warp_epoch, uint32_t clock,
             uint32_t unit) {
  if (epoch < c.epoch) return true;
  const uint32_t warp = unit >> 5, other = other_unit >> 5;
  if (other == warp) return warp_epoch < c.warp_epoch[warp];
  return c.by_phases && c.clock_of(warp)[other] >= clock;
}

// Keeps a read of shared byte `byte` by unit `me` in its plane's ReadClock.
void note_read(Cube& c, Shadow& e, uint64_t byte, uint32_t me) {
  const uint32_t warp = me >> 5;
  ReadClock& r = c.w.read_clock[byte * c.warp_count + warp];
  const uint32_t bit = 1u << warp;
  if (!(e.read_planes & bit) || r.warp_epoch != c.warp_epoch[warp])
    r.reader = static_cast<uint16_t>(me + 1);
  else if (r.reader != me + 1)
    r.reader = kSeveral;
  r.warp_epoch = c.warp_epoch[warp];
  r.clock = c.clock_of(warp)[warp];
  e.read_planes |= bit;
}

void check_shared(Cube& c, Slot& s, uintptr_t offset, uint64_t bytes, uint32_t how,
                  const char* file, uint32_t line) {
  if (c.fault) return;  // the first fault is what gets reported; keep the rest cheap
  const uint32_t me = s.linear, warp = me >> 5;
  for (uint64_t b = 0; b < bytes; ++b) {
    Shadow& e = c.w.shadow[offset + b];
    const bool written = e.gen == c.w.gen;
    const uint32_t writer = written ? e.writer : 0;
    const bool atomic = how & abi::kAtomic;
    if (!written && (how & abi::kLoad || atomic)) {
      c.report(me, fmt::format("{}: error: {} {} shared memory that no unit of the cube has "
                               "written yet (shared memory starts uninitialized; if another unit "
                               "writes it, a sync_cube is missing between that write and this)",
                               at(file, line), c.where_in(me), atomic ? "updates" : "reads"));
      return;
    }
    // Whether the last write is ordered before this access: by the same unit, or a sync_cube
    // (or, within a plane, a sync_plane) since; atomics are ordered with each other.
    const bool after_write =
        !written || writer == me + 1 || (atomic && writer == kAtomicWriter) ||
        (writer == kAtomicWriter ? e.epoch < c.epoch
                                 : ordered(c, writer - 1u, e.epoch, e.warp_epoch, e.wclock, me));
    if (!after_write) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} {} bytes that {} "
                               "wrote at {} with no sync_cube between them",
                               at(file, line), c.where_in(me), access_words(how),
                               how & abi::kLoad ? "reads" : "writes",
                               writer == kAtomicWriter ? std::string("atomics")
                                                       : fmt::format("unit {}", writer - 1u),
                               at(e.file, e.line)));
      return;
    }
    if (how & abi::kUnkept) continue;
    if (how & abi::kAsync) {
      e.async_gen = c.w.gen;
      e.async_mma = c.w.tmem_state.issued;
      continue;
    }
    if (how & abi::kBulk) {
      e.bulk_gen = c.w.gen;
      e.bulk_group = c.w.tmem_state.bulk_issued;
      continue;
    }
    if (!(how & abi::kLoad) && e.bulk_gen == c.w.gen && e.bulk_group > c.w.tmem_state.bulk_waited) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                               "that an asynchronous TMA store may still be reading (bulk group "
                               "{} of the cube): tma_store_wait() for it first",
                               at(file, line), c.where_in(me), access_words(how), e.bulk_group));
      return;
    }
    if (!(how & abi::kLoad) && e.async_gen == c.w.gen && e.async_mma > c.w.tmem_state.waited) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                               "that a tcgen05_mma may still be reading (multiply {} of the "
                               "cube, not yet waited for): wait for the mbarrier its "
                               "tcgen05_commit arrives on before writing what it reads",
                               at(file, line), c.where_in(me), access_words(how), e.async_mma));
      return;
    }
    if (how & abi::kLoad) {
      if (e.read_gen != c.w.gen || e.read_epoch != c.epoch) {
        e.read_gen = c.w.gen;
        e.read_epoch = c.epoch;
        e.read_warp_epoch = c.warp_epoch[warp];
        e.reader = static_cast<uint16_t>(me + 1);
        e.read_planes = 0;
      } else if (e.reader != me + 1) {
        e.reader = kSeveral;
      }
      if (c.by_phases) note_read(c, e, offset + b, me);
      continue;
    }
    if (c.by_phases && e.read_gen == c.w.gen && e.read_epoch == c.epoch) {
      // Every plane's reads since the last sync_cube must be ordered before this write.
      const uint32_t* mine = c.clock_of(warp);
      for (uint32_t planes = e.read_planes; planes; planes &= planes - 1) {
        const auto p = static_cast<uint32_t>(__builtin_ctz(planes));
        const ReadClock& r = c.w.read_clock[(offset + b) * c.warp_count + p];
        const bool before = p == warp ? r.reader == me + 1 || r.warp_epoch < c.warp_epoch[warp]
                                      : mine[p] >= r.clock;
        if (before) continue;
        c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                                 "that {} read with nothing ordering the read first (no "
                                 "sync_cube, and no mbarrier phase that plane {} arrived on "
                                 "after the read and this plane waited for: in a pipeline, a "
                                 "stage is written only in the round that owns it)",
                                 at(file, line), c.where_in(me), access_words(how),
                                 r.reader == kSeveral ? fmt::format("units of plane {}", p)
                                                      : fmt::format("unit {}", r.reader - 1u),
                                 p));
        return;
      }
    } else if (e.read_gen == c.w.gen && e.read_epoch == c.epoch && e.reader != me + 1 &&
               !(e.reader != kSeveral && ((e.reader - 1u) >> 5) == warp &&
                 e.read_warp_epoch < c.warp_epoch[warp])) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                               "that {} read since the last sync_cube (add a sync_cube between "
                               "the read and the write)",
                               at(file, line), c.where_in(me), access_words(how),
                               e.reader == kSeveral ? std::string("other units")
                                                    : fmt::format("unit {}", e.reader - 1u)));
      return;
    }
    e.gen = c.w.gen;
    e.epoch = c.epoch;
    e.warp_epoch = c.warp_epoch[warp];
    e.writer = atomic ? kAtomicWriter : static_cast<uint16_t>(me + 1);
    e.wclock = c.by_phases ? c.clock_of(warp)[warp] : 0;
    e.file = file;
    e.line = line;
    if (!atomic) e.read_gen = 0;
  }
}

bool api_access(const void* p, uint64_t bytes, uint32_t how, const char* file, uint32_t line) {
  Slot& s = here();
  Cube& c = *s.cube;
  if (how & abi::kStore) ++c.progress;  // a waiting unit re-reads before it spins again
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto shared = reinterpret_cast<uintptr_t>(s.u.shared);
  if (c.L.shared_bytes && a >= shared && a + bytes <= shared + c.L.shared_bytes) {
    check_shared(c, s, a - shared, bytes, how, file, line);
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
  if (s.spin_progress != c.progress) {
    s.spin_progress = c.progress;
    s.idle_spins = 0;
  } else if (++s.idle_spins > 3) {
    c.report(s.linear, fmt::format("{}: error: {} in {}; the cube was stopped", at(file, line),
                                   what, c.where_in(s.linear)));
    c.stop = true;
  }
  yield(s);
}

// Ordering by mbarrier phases (abi.h kOrderBegin and friends).
void api_order(const void* bar, uint32_t what, uint32_t parity) {
  Slot& s = here();
  Cube& c = *s.cube;
  if (what == abi::kRelease) ++c.progress;  // a waiting unit looks again
  const uint32_t n = c.warp_count;
  if (what == abi::kOrderBegin) {
    if (c.by_phases) return;
    c.by_phases = true;
    c.clock.assign(size_t{n} * n, 0);
    for (uint32_t p = 0; p < n; ++p) c.clock_of(p)[p] = 1;
    c.phase_clocks.clear();
    const size_t need = size_t{c.L.shared_bytes} * n;
    if (c.w.read_clock.size() < need) c.w.read_clock.resize(need);
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
  ++c.progress;
  if (c.barrier_arrived > 0 && c.barrier_arrived == c.units - c.retired) complete_barrier(c);
}

const Api g_api = {abi::kAbiVersion,  api_current, api_barrier, api_collective, api_access,
                   api_out_of_bounds, api_misuse,  api_spin,    api_order,      api_retire};

// Why no unit can go on: the first collective or barrier that cannot complete.
void diagnose(Cube& c) {
  auto status = [&](const Slot& o) -> std::string {
    switch (o.state) {
      case State::Done:
        return "has returned";
      case State::Barrier:
        return fmt::format("waits at the sync_cube at {}", at(o.file, o.line));
      case State::Collective:
        return fmt::format("waits at the plane operation at {}", at(o.file, o.line));
      default:
        return "is running";
    }
  };
  for (uint32_t warp = 0; warp < c.warp_count; ++warp) {
    for (const WarpOp& op : c.warps[warp]) {
      for (uint32_t l = 0; l < 32; ++l) {
        if (!(op.mask >> l & 1u) || (op.arrived >> l & 1u)) continue;
        const uint32_t u = warp * 32 + l;
        const std::string missing =
            u < c.units ? fmt::format("unit {} (lane {}) {}", u, l, status(c.w.slots[u]))
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
    const Slot& o = c.w.slots[u];
    if (o.state == State::Barrier) continue;
    c.report(u, fmt::format("{}: error: the sync_cube in kernel '{}' (cube {}) never completed: "
                            "{} of {} units wait at it, but unit {} {} (every unit of a cube must "
                            "reach the same sync_cube the same number of times)",
                            at(c.barrier_file, c.barrier_line), c.L.kernel, c.cube,
                            c.barrier_arrived, c.units, u, status(o)));
    return;
  }
}

std::optional<Fault> run_cube(const Launch& L, Worker& w, uint32_t cube) {
  Cube c(L, w);
  c.cube = cube;
  c.units = L.cube_dim.x * L.cube_dim.y * L.cube_dim.z;
  c.warp_count = (c.units + 31) / 32;
  if (w.warps.size() < c.warp_count) w.warps.resize(c.warp_count);
  for (uint32_t i = 0; i < c.warp_count; ++i) w.warps[i].clear();
  c.warp_epoch.assign(c.warp_count, 1);
  if (w.shared.size() < L.shared_bytes) {
    w.shared.resize(L.shared_bytes);
    w.shadow.assign(L.shared_bytes, Shadow{});
    w.gen = 0;
  }
  if (++w.gen == 0) {  // wrapped: forget everything
    std::fill(w.shadow.begin(), w.shadow.end(), Shadow{});
    w.gen = 1;
  }
  if (w.slots.size() < c.units) w.slots.resize(c.units);
  if (w.tmem.empty()) w.tmem.resize(128 * 512);
  w.tmem_state = abi::TmemState{};
  const Dim3 block{cube % L.cubes.x, (cube / L.cubes.x) % L.cubes.y,
                   cube / (L.cubes.x * L.cubes.y)};
  for (uint32_t u = 0; u < c.units; ++u) {
    Slot& s = w.slots[u];
    s.u.thread_idx = {u % L.cube_dim.x, (u / L.cube_dim.x) % L.cube_dim.y,
                      u / (L.cube_dim.x * L.cube_dim.y)};
    s.u.block_idx = block;
    s.u.block_dim = L.cube_dim;
    s.u.grid_dim = L.cubes;
    s.u.shared = w.shared.data();
    s.u.tmem = w.tmem.data();
    s.u.tmem_state = &w.tmem_state;
    s.state = State::Ready;
    s.spin_progress = 0;
    s.idle_spins = 0;
    s.retired = false;
    s.linear = u;
    s.cube = &c;
  }
  if (!L.fibers) {
    // The units run one after another on a stack of the engine's (so that they find their
    // slot as fibers do), in one switch from the thread's own stack and back.
    if (!w.plain.stack && !fiber_map(w.plain))
      return Fault{cube, 0,
                   fmt::format("{}: cannot map a stack for kernel '{}': {}", L.device, L.kernel,
                               std::strerror(errno))};
    fiber_start(w.plain, plain_main, &c);
    fiber_enter_from_main(w.main);
    fiber_switch(w.main, w.plain);
  } else {
    for (uint32_t u = 0; u < c.units; ++u) {
      Slot& s = w.slots[u];
      if (!s.fiber.stack && !fiber_map(s.fiber)) {
        return Fault{cube, u,
                     fmt::format("{}: cannot map a stack for unit {} of kernel '{}': {}", L.device,
                                 u, L.kernel, std::strerror(errno))};
      }
      fiber_start(s.fiber, fiber_main, &s);
      stack_slot(s.fiber.stack) = &s;
    }
    // Each pass starts at the first ready unit; the units hand the thread on in order (yield)
    // and the last one of the pass comes back here.
    for (;;) {
      Slot* first = nullptr;
      bool done = true;
      for (uint32_t u = 0; u < c.units && !first; ++u) {
        Slot& s = w.slots[u];
        done = done && s.state == State::Done;
        if (s.state == State::Ready) first = &s;
      }
      if (done) break;
      if (!first) {
        diagnose(c);
        break;
      }
      fiber_enter_from_main(w.main);
      fiber_switch(w.main, first->fiber);
      if (c.stop) break;
    }
  }
  if (!c.fault && w.tmem_state.bulk_issued > w.tmem_state.bulk_waited)
    c.report(0, fmt::format("{}: error: cube {} of kernel '{}' ends with an asynchronous TMA "
                            "store (the last one issued here) still reading shared memory; "
                            "tma_store_wait(0) before the end of the kernel",
                            at(w.tmem_state.bulk_file, w.tmem_state.bulk_line), c.cube, L.kernel));
  if (!c.fault && w.tmem_state.allocated)
    c.report(0, fmt::format("{}: error: tensor memory is still allocated when cube {} of kernel "
                            "'{}' ends (on a GPU the next cube on that SM waits for it forever); "
                            "tmem_free() every allocation before the kernel returns",
                            at(w.tmem_state.file, w.tmem_state.line), c.cube, L.kernel));
  return std::move(c.fault);
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
    std::string templ = fmt::format("{}/kiln-emu-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
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
  std::mutex mu;
  std::optional<Fault> first;
  ThreadPool& pool = ThreadPool::global();
  const uint32_t n = static_cast<uint32_t>(cubes);
  const uint32_t chunk = std::max<uint32_t>(1, n / (static_cast<uint32_t>(pool.threads()) * 8));
  pool.parallel_for(n, chunk, [&](uint32_t begin, uint32_t end) {
    Worker& w = worker();
    for (uint32_t cube = begin; cube < end; ++cube) {
      auto f = run_cube(L, w, cube);
      if (!f) continue;
      std::lock_guard lock(mu);
      if (!first || f->cube < first->cube) first = std::move(f);
    }
  });
  return first;
}

}  // namespace kiln::detail::emu
