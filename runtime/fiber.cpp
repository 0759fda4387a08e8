// Fibers (fiber.h): the switch, stacks with guard pages, and the sanitizers' bookkeeping.
#include "runtime/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#if KILN_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace kiln::detail::fiber {

#if defined(__x86_64__)
extern "C" void kiln_fiber_switch(void** save_sp, void* to_sp);
extern "C" void kiln_fiber_entry();
asm(R"(
  .text
  .globl kiln_fiber_switch
  .hidden kiln_fiber_switch
  .type kiln_fiber_switch, @function
kiln_fiber_switch:
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
  .size kiln_fiber_switch, .-kiln_fiber_switch

  .globl kiln_fiber_entry
  .hidden kiln_fiber_entry
  .type kiln_fiber_entry, @function
kiln_fiber_entry:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size kiln_fiber_entry, .-kiln_fiber_entry
)");

// Lays out a new fiber's stack as kiln_fiber_switch leaves a suspended one: it resumes in
// kiln_fiber_entry, which calls fn(arg) with the stack aligned as after a call.
static void lay_out(Fiber& f, void (*fn)(void*), void* arg) {
  auto* s = reinterpret_cast<uint64_t*>(
      reinterpret_cast<uintptr_t>(f.stack + kStackBytes - kHeaderBytes) & ~uintptr_t{15});
  *--s = reinterpret_cast<uint64_t>(&kiln_fiber_entry);
  *--s = 0;                                // rbp
  *--s = reinterpret_cast<uint64_t>(arg);  // rbx
  *--s = reinterpret_cast<uint64_t>(fn);   // r12
  *--s = 0;                                // r13
  *--s = 0;                                // r14
  *--s = 0;                                // r15
  f.sp = s;
}
static void raw_switch(Fiber& from, Fiber& to) {
  kiln_fiber_switch(&from.sp, to.sp);
}
#else
static thread_local void (*t_start_fn)(void*) = nullptr;
static thread_local void* t_start_arg = nullptr;
static void fiber_trampoline() {
  t_start_fn(t_start_arg);
}
static void lay_out(Fiber& f, void (*fn)(void*), void* arg) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes - kHeaderBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_trampoline, 0);
  // The arguments reach the trampoline through thread-locals, set just before its first run.
  t_start_fn = fn;
  t_start_arg = arg;
}
static void raw_switch(Fiber& from, Fiber& to) {
  swapcontext(&from.ctx, &to.ctx);
}
#endif

// A stack is reused by the next fiber started on it. Under ASan the shadow of the frames a
// finished fiber never returned from (its last switch away) still marks their redzones
// poisoned; code the sanitizer does not see (JIT-compiled kernels) may then keep its locals
// there, and an instrumented helper reading them (kiln_rt_tma_load reading a copy's
// coordinates) would be reported. A new fiber starts on a clean stack.
void fiber_start(Fiber& f, void (*fn)(void*), void* arg) {
#if KILN_FIBER_ASAN
  __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
  lay_out(f, fn, arg);
}

// Sanitizers follow the switches through their fiber interfaces: ASan moves its idea of the
// current stack (or it reports the fibers' frames as overflows), TSan keeps a clock per fiber.
// The thread's own stack, the scheduler's, is learnt by the first fiber it switches to.
#if KILN_FIBER_ASAN
static thread_local bool t_leaving_main = false;
static thread_local Fiber* t_main = nullptr;
#endif

// Called first thing on a fiber's stack each time it (or the scheduler) runs again.
void fiber_arrived([[maybe_unused]] Fiber& self) {
#if KILN_FIBER_ASAN
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
void fiber_switch(Fiber& from, Fiber& to, [[maybe_unused]] bool finished) {
#if KILN_FIBER_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &from.fake_stack, to.bottom, to.size);
#endif
#if KILN_FIBER_TSAN
  __tsan_switch_to_fiber(to.tsan, 0);
#endif
  raw_switch(from, to);
  fiber_arrived(from);
}

// Called by the scheduler (on the thread's stack) before it runs fibers.
void fiber_enter_from_main([[maybe_unused]] Fiber& main) {
#if KILN_FIBER_ASAN
  t_leaving_main = true;
  t_main = &main;
#endif
#if KILN_FIBER_TSAN
  main.tsan = __tsan_get_current_fiber();
#endif
}

// A stack aligned to kStackBytes with a guard page below it: an overflow faults instead of
// corrupting. Mapped at twice the size, then trimmed to the aligned part.
static char* map_stack() {
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
static void unmap_stack(char* stack) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ::munmap(stack - page, kStackBytes + page);
}

// Gives a fiber its stack (and the sanitizers' records of it); false when none can be mapped.
bool fiber_map(Fiber& f) {
  f.stack = map_stack();
  if (!f.stack) return false;
#if KILN_FIBER_ASAN
  f.bottom = f.stack;
  f.size = kStackBytes;
#endif
#if KILN_FIBER_TSAN
  f.tsan = __tsan_create_fiber(0);
#endif
  return true;
}
void fiber_unmap(Fiber& f) {
  unmap_stack(f.stack);
#if KILN_FIBER_TSAN
  __tsan_destroy_fiber(f.tsan);
#endif
}

}  // namespace kiln::detail::fiber
