// The CUDA emulator's engine, as its two parts share it (internal to the runtime): the units
// (Slot), the cubes and clusters they run in, the memory a host thread keeps for them, and the
// race detector's records. exec.cpp schedules units and implements kiln_emu_abi.h;
// races.cpp checks shared-memory accesses for races.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "compiler/cuda/emu/abi.h"
#include "runtime/emu/exec.h"
#include "runtime/fiber.h"

namespace kiln::detail::emu {

namespace abi = ::kiln::emu;
using ::kiln::detail::fiber::Fiber;
using ::kiln::emu::Dim3;
using ::kiln::emu::Unit;

// The allocations this thread hit last (a kernel reads and writes a few tensors over and over).
struct RangeCache {
  static constexpr int kWays = 4;
  uintptr_t lo[kWays] = {}, hi[kWays] = {};
  uint64_t version = 0;
  int next = 0;
};
struct Cube;
struct Slot;

// ---- cubes ----------------------------------------------------------------------------------

enum class State : uint8_t { Ready, Barrier, ClusterBarrier, Collective, Done };

struct Slot {
  Unit u{};
  Cube* cube = nullptr;  // the cube it runs in
  Fiber fiber;
  State state = State::Ready;
  uint32_t linear = 0;         // in its cube
  uint32_t global = 0;         // in its cluster's slots (rank * units + linear)
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
  // Clusters: the cluster barrier phase of the last write and of the cube's last read, and of
  // the last read by another cube of the cluster (cluster_load), plus one (0: none), with the
  // cube generation it was in and the reader's rank.
  uint32_t cluster_write = 0, cluster_read = 0, remote_read = 0, remote_gen = 0;
  uint16_t remote_reader = 0;
};
constexpr uint16_t kAtomicWriter = 0xffff, kSeveral = 0xffff;

// A plane's latest read of a byte of shared memory, when ordering by mbarrier phases: its
// clock, the plane's sync_plane count then, and the reading unit + 1 (kSeveral: more than one
// unit of the plane since its last sync_plane).
struct ReadClock {
  uint32_t clock = 0, warp_epoch = 0;
  uint16_t reader = 0;
};

// A cube's memory, kept by a host thread between cubes: the shared arena and its shadow, the
// waiting collectives of each warp, tensor memory.
struct CubeMem {
  std::vector<std::vector<WarpOp>> warps;  // kept between cubes for their capacity
  std::vector<unsigned char> shared;
  std::vector<Shadow> shadow;
  std::vector<ReadClock> read_clock;  // shared byte x plane, when ordering by mbarrier phases
  uint32_t gen = 0;
  std::vector<uint32_t> tmem;  // the cube's tensor memory (tcgen05), 128 x 512 cells
  abi::TmemState tmem_state{};
};

// What a host thread keeps between clusters: fiber stacks and each rank's cube memory.
struct Worker {
  std::vector<Slot> slots;  // the cluster's units, rank after rank
  std::vector<CubeMem> mem;
  Fiber main;
  Fiber plain;        // where the units of a kernel without barriers run, one after another
  RangeCache ranges;  // the allocations this thread's units hit last
  ~Worker() {
    for (Slot& s : slots)
      if (s.fiber.stack) fiber_unmap(s.fiber);
    if (plain.stack) fiber_unmap(plain);
  }
};
inline const char* access_words(uint32_t how) {
  if (how & abi::kAtomic) return "atomic";
  return how & abi::kStore ? "store" : "load";
}

inline std::string at(const char* file, uint32_t line) {
  return fmt::format("{}:{}", file ? file : "(unknown)", line);
}

struct Cube;

// The cubes of a cluster, which run together: their units are fibers of one scheduler. A cube
// is a cluster of one without clusters.
struct Cluster {
  std::vector<Cube*> cubes;  // by rank
  uint32_t units = 0;        // of all cubes
  uint32_t epoch = 0;        // completed sync_clusters
  uint32_t arrived = 0;
  const char* file = nullptr;  // the sync_cluster being waited at
  uint32_t line = 0;
  // Counts what lets a waiting unit go on: barriers, collectives, writes, units finishing.
  uint64_t progress = 0;
  bool stop = false;  // abandon the cluster (a barrier or collective can never complete)
};

struct Cube {
  const Launch& L;
  Worker& w;
  Cluster& cl;
  CubeMem& m;
  uint32_t rank = 0, first = 0;  // in the cluster, and its unit 0's slot
  uint32_t done = 0;             // units that have returned
  // The last read of its shared memory by another cube (cluster_load): its cluster phase plus
  // one, the reader's rank and where.
  uint32_t remote_read = 0, remote_reader = 0;
  const char* remote_file = nullptr;
  uint32_t remote_line = 0;
  uint32_t cube = 0, units = 0, warp_count = 0;
  uint32_t epoch = 0;  // completed barriers
  uint32_t barrier_arrived = 0;
  const char* barrier_file = nullptr;
  uint32_t barrier_line = 0;
  std::vector<std::vector<WarpOp>>& warps;  // the waiting collectives of each warp (m's)
  std::vector<uint32_t> warp_epoch;
  std::optional<Fault> fault;
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

  Cube(const Launch& l, Worker& wk, Cluster& c, CubeMem& mem)
      : L(l), w(wk), cl(c), m(mem), warps(mem.warps) {}
  Slot& slot(uint32_t unit) { return w.slots[first + unit]; }
  const Slot& slot(uint32_t unit) const { return w.slots[first + unit]; }

  void report(uint32_t unit, std::string message) {
    if (fault && fault->unit <= unit) return;
    fault = Fault{cube, unit, std::move(message)};
  }
  std::string where_in(uint32_t unit) const {
    return fmt::format("kernel '{}' (cube {}, unit {})", L.kernel, cube, unit);
  }
};

// ---- the race detector (races.cpp) ---------------------------------------------------------

// A unit's access to `bytes` of its cube's shared memory from `offset` on (abi.h's `how`).
void check_shared(Cube& c, Slot& s, uintptr_t offset, uint64_t bytes, uint32_t how,
                  const char* file, uint32_t line);
// An access by a unit of cube `by` to the shared memory of another cube of its cluster, `c`.
void check_remote(Cube& c, Cube& by, Slot& s, uintptr_t offset, uint64_t bytes, uint32_t how,
                  const char* file, uint32_t line);
// Every unit of cube c has returned.
void cube_exited(Cube& c);

}  // namespace kiln::detail::emu
