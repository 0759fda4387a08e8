// Fibers: stacks that one host thread switches between by hand, for what must run
// interleaved but not in parallel: the units of an emulated cube (runtime/emu/exec.cpp) and the
// cubes of a cluster on the CPU (runtime/cpu/exec.cpp). A fiber is a stack and a saved stack
// pointer. On x86-64 the switch saves the callee-saved registers on the old stack and restores
// them from the new one (a few nanoseconds, no system call); the floating-point control words
// are the thread's, which no kernel changes. Elsewhere ucontext does the same, slower.
// Sanitizers follow the switches through their fiber interfaces.
#pragma once

#include <cstddef>
#include <cstdint>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define KILN_FIBER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KILN_FIBER_ASAN)
#define KILN_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(KILN_FIBER_TSAN)
#define KILN_FIBER_TSAN 1
#endif
#if KILN_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if KILN_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace kiln::detail::fiber {

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
#if KILN_FIBER_ASAN
  void* fake_stack = nullptr;  // ASan's fake frames of this fiber while it is suspended
  const void* bottom = nullptr;
  size_t size = 0;
#endif
#if KILN_FIBER_TSAN
  void* tsan = nullptr;
#endif
};

// Lays out a new fiber's stack so that its first switch-in calls fn(arg). fn must never return:
// it ends by switching away with finished = true.
void fiber_start(Fiber& f, void (*fn)(void*), void* arg);
// Called first thing on a fiber's stack each time it (or the scheduler) runs again.
void fiber_arrived(Fiber& self);
// Switches from the running fiber to another; `finished`: `from` never runs again.
void fiber_switch(Fiber& from, Fiber& to, bool finished = false);
// Called by the scheduler (on the thread's stack, `main`) before it switches to fibers.
void fiber_enter_from_main(Fiber& main);
// Gives a fiber its stack (kStackBytes, aligned to kStackBytes, a guard page below) and the
// sanitizers' records of it; false when none can be mapped.
bool fiber_map(Fiber& f);
void fiber_unmap(Fiber& f);

}  // namespace kiln::detail::fiber
