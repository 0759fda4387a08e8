// The interface between an emulated kernel module and the emulator (cuda-emu). The emulation
// backend compiles a kernel's CUDA C++ for the host into a shared object that exports
//   uint32_t kiln_emu_abi(void)              kAbiVersion
//   void     kiln_emu_bind(const Api* api)   before anything runs
//   void     kiln_emu_unit(const void* slots) one unit of the kernel, on the current fiber
// and calls back into the emulator (runtime/emu/exec.cpp) through Api for everything that is
// not plain computation: the unit's position, barriers, warp collectives and memory checks.
// Plain C++ types only: the runtime includes this header and the module is built with it.
#pragma once

#include <stdint.h>

namespace kiln::emu {

inline constexpr uint32_t kAbiVersion = 5;

struct Dim3 {
  uint32_t x, y, z;
};

// What a running unit sees; the emulator finds the current one from the running stack.
struct Unit {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  uint32_t cluster_rank;  // the cube's rank in its cluster
  unsigned char* shared;  // the cube's shared-memory arena
  // The cube's tensor memory (tcgen05): 128 lanes x 512 columns of 32 bits, lane-major, and
  // what the emulator tracks of it (TmemState).
  uint32_t* tmem;
  struct TmemState* tmem_state;
  alignas(16) unsigned char scratch[64];  // the target of an atomic on an index out of range
};

// Access kinds (`how`), combinable with kSharedSpace when the caller knows the address is in
// the cube's shared arena, and kAsync for a load by the tensor cores (tcgen05.mma): checked
// against earlier stores, but not kept as a read that later stores race with, since the
// mbarrier wait for the multiply orders it before them.
// kBulk: a load by an asynchronous TMA store, which reads until a tma_store_wait covers its
// bulk group (TmemState::bulk_issued at the load).
// kUnkept: a load checked against earlier stores but not kept as a read (a wgmma's, kept when
// its group completes).
enum : uint32_t {
  kLoad = 1,
  kStore = 2,
  kAtomic = 4,
  kSharedSpace = 8,
  kAsync = 16,
  kBulk = 32,
  kUnkept = 64
};
// Memory spaces of bounded (shared and local) arrays.
enum : uint32_t { kGlobal = 0, kShared = 1, kLocal = 2 };
// Warp collectives (the __reduce_*_sync ones on 32-bit values, signed or unsigned).
enum : uint32_t {
  kShuffle = 0,
  kAny = 1,
  kAll = 2,
  kBallot = 3,
  kSyncWarp = 4,
  kReduceAdd = 5,
  kReduceMinU = 6,
  kReduceMaxU = 7,
  kReduceMinS = 8,
  kReduceMaxS = 9,
  kReduceAnd = 10,
  kReduceOr = 11,
  kReduceXor = 12,
};

// Per cube: the tensor-memory columns allocated (bit c: columns 32c .. 32c + 31), the
// multiplies issued, covered by a commit and waited for (counts), and where the last allocation
// was made. A commit is pending until a wait sees the phase it arrived in complete: the
// mbarrier it arrived on, that phase's parity and the multiplies it covers (the first `issued`).
struct TmemCommit {
  const void* bar;
  uint32_t parity, issued;
};
enum : uint32_t { kMaxPendingCommits = 16 };
struct TmemState {
  uint32_t allocated;
  uint32_t issued, committed, waited;
  const char* file;
  uint32_t line;
  uint32_t pending;
  TmemCommit commits[kMaxPendingCommits];
  // Bulk groups of TMA stores (unit 0's): issued, and known to have read their shared memory;
  // where the last asynchronous one was issued.
  uint32_t bulk_issued, bulk_waited;
  const char* bulk_file;
  uint32_t bulk_line;
};

// Ordering through mbarriers (Api::order), for a warp-specialized pipeline, whose planes order
// their shared-memory accesses by mbarrier phases instead of cube barriers: kBegin starts the
// tracking for the cube; kRelease: the calling unit arrives on the mbarrier (or completes bytes
// on it), which orders its plane's accesses so far before whoever waits for the phase;
// kPhaseDone: that phase (of parity `parity`) has completed; kAcquire: the unit's wait for the
// phase of parity `parity` has succeeded.
enum : uint32_t { kOrderBegin = 0, kRelease = 1, kPhaseDone = 2, kAcquire = 3 };

struct Api {
  uint32_t version;
  Unit* (*current)();
  // __syncthreads() at file:line.
  void (*barrier)(const char* file, uint32_t line);
  // A warp collective of the lanes in `mask`: runs when all of them have arrived. `operand` is
  // the source lane of a shuffle.
  uint64_t (*collective)(uint32_t kind, uint32_t mask, uint64_t value, uint32_t operand,
                         const char* file, uint32_t line);
  // Whether `bytes` at `p` may be accessed: false (and reported) outside the device's
  // allocations, the cube's shared arena and the unit's own stack. Shared accesses feed the
  // race detector.
  bool (*access)(const void* p, uint64_t bytes, uint32_t how, const char* file, uint32_t line);
  // An index past the end of a shared or local array.
  void (*out_of_bounds)(uint32_t space, uint32_t how, uint64_t index, uint64_t count,
                        const char* file, uint32_t line);
  // A misuse of a CUDA feature that the hardware leaves undefined (a wgmma accumulator read
  // while the multiply is in flight, ...): `what` says which and how to fix it.
  void (*misuse)(const char* what, const char* file, uint32_t line);
  // The unit waits for another to change memory (an mbarrier phase): the others run first. If
  // no unit makes progress any more, the cube is stopped with `what` as the report.
  void (*spin)(const char* what, const char* file, uint32_t line);
  // An ordering event on the mbarrier at `bar` (kOrderBegin and friends).
  void (*order)(const void* bar, uint32_t what, uint32_t parity);
  // The unit leaves the cube for good (a pipeline's producer plane): barriers stop waiting
  // for it. It returns from the kernel next.
  void (*retire)();
  // sync_cluster at file:line: every unit of every cube of the cluster arrives.
  void (*cluster_barrier)(const char* file, uint32_t line);
  // The address of the byte at `p` of the cube's shared memory in the cube of rank `rank` of its
  // cluster (distributed shared memory), for cluster_load and multicast copies; null, reported,
  // for a rank outside the cluster. Accesses there go through `access` as usual.
  void* (*map_shared)(const void* p, uint32_t rank, const char* file, uint32_t line);
};

}  // namespace kiln::emu
