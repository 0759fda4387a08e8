// The emulator's shared-memory race detector (emu_engine.h): per byte of a cube's shared memory
// the last write and the reads since, ordered by barriers, sync_plane, mbarrier phases (in a
// pipeline) and, across the cubes of a cluster, sync_cluster.
#include <fmt/format.h>

#include "runtime/emu/engine.h"

namespace kiln::detail::emu {

namespace {

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
  ReadClock& r = c.m.read_clock[byte * c.warp_count + warp];
  const uint32_t bit = 1u << warp;
  if (!(e.read_planes & bit) || r.warp_epoch != c.warp_epoch[warp])
    r.reader = static_cast<uint16_t>(me + 1);
  else if (r.reader != me + 1)
    r.reader = kSeveral;
  r.warp_epoch = c.warp_epoch[warp];
  r.clock = c.clock_of(warp)[warp];
  e.read_planes |= bit;
}

}  // namespace

void check_shared(Cube& c, Slot& s, uintptr_t offset, uint64_t bytes, uint32_t how,
                  const char* file, uint32_t line) {
  if (c.fault) return;  // the first fault is what gets reported; keep the rest cheap
  const uint32_t me = s.linear, warp = me >> 5;
  for (uint64_t b = 0; b < bytes; ++b) {
    Shadow& e = c.m.shadow[offset + b];
    const bool written = e.gen == c.m.gen;
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
      e.async_gen = c.m.gen;
      e.async_mma = c.m.tmem_state.issued;
      continue;
    }
    if (how & abi::kBulk) {
      e.bulk_gen = c.m.gen;
      e.bulk_group = c.m.tmem_state.bulk_issued;
      continue;
    }
    if (!(how & abi::kLoad) && e.bulk_gen == c.m.gen && e.bulk_group > c.m.tmem_state.bulk_waited) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                               "that an asynchronous TMA store may still be reading (bulk group "
                               "{} of the cube): tma_store_wait() for it first",
                               at(file, line), c.where_in(me), access_words(how), e.bulk_group));
      return;
    }
    if (!(how & abi::kLoad) && e.async_gen == c.m.gen && e.async_mma > c.m.tmem_state.waited) {
      c.report(me, fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                               "that a tcgen05_mma may still be reading (multiply {} of the "
                               "cube, not yet waited for): wait for the mbarrier its "
                               "tcgen05_commit arrives on before writing what it reads",
                               at(file, line), c.where_in(me), access_words(how), e.async_mma));
      return;
    }
    if (!(how & abi::kLoad) && e.remote_gen == c.m.gen && e.remote_read == c.cl.epoch + 1) {
      c.report(me,
               fmt::format("{}: error: shared-memory race in {}: this {} overwrites bytes "
                           "that cube {} of the cluster read through cluster_load at {} with "
                           "no sync_cluster between them",
                           at(file, line), c.where_in(me), access_words(how),
                           c.cl.cubes[e.remote_reader]->cube, at(c.remote_file, c.remote_line)));
      return;
    }
    if (how & abi::kLoad) {
      e.cluster_read = c.cl.epoch;
      if (e.read_gen != c.m.gen || e.read_epoch != c.epoch) {
        e.read_gen = c.m.gen;
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
    if (c.by_phases && e.read_gen == c.m.gen && e.read_epoch == c.epoch) {
      // Every plane's reads since the last sync_cube must be ordered before this write.
      const uint32_t* mine = c.clock_of(warp);
      for (uint32_t planes = e.read_planes; planes; planes &= planes - 1) {
        const auto p = static_cast<uint32_t>(__builtin_ctz(planes));
        const ReadClock& r = c.m.read_clock[(offset + b) * c.warp_count + p];
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
    } else if (e.read_gen == c.m.gen && e.read_epoch == c.epoch && e.reader != me + 1 &&
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
    e.gen = c.m.gen;
    e.epoch = c.epoch;
    e.warp_epoch = c.warp_epoch[warp];
    e.writer = atomic ? kAtomicWriter : static_cast<uint16_t>(me + 1);
    e.wclock = c.by_phases ? c.clock_of(warp)[warp] : 0;
    if (!atomic) e.cluster_write = c.cl.epoch;  // atomics are ordered with each other
    e.file = file;
    e.line = line;
    if (!atomic) e.read_gen = 0;
  }
}

// An access by a unit of cube `by` to the shared memory of another cube of its cluster, `c`:
// a cluster_load (kLoad), or a tma_load_multicast's bytes landing (kStore, written as c's own
// TMA unit, unit 0, writes them). Only a sync_cluster orders accesses of different cubes.
void check_remote(Cube& c, Cube& by, Slot& s, uintptr_t offset, uint64_t bytes, uint32_t how,
                  const char* file, uint32_t line) {
  if (by.fault || c.fault) return;
  Cluster& cl = c.cl;
  const uint32_t me = s.linear;
  if (how & abi::kLoad) {
    if (c.done == c.units) {
      by.report(me, fmt::format("{}: error: {} reads the shared memory of cube {} of its cluster, "
                                "which has returned (its shared memory is gone on a GPU): a "
                                "sync_cluster after the last cluster_load keeps every cube of "
                                "the cluster until the reads are done",
                                at(file, line), by.where_in(me), c.cube));
      return;
    }
    for (uint64_t b = 0; b < bytes; ++b) {
      Shadow& e = c.m.shadow[offset + b];
      if (e.gen != c.m.gen) {
        by.report(me, fmt::format("{}: error: {} reads shared memory of cube {} of its cluster "
                                  "that no unit of that cube has written yet (write it, then "
                                  "sync_cluster, then read it)",
                                  at(file, line), by.where_in(me), c.cube));
        return;
      }
      if (e.cluster_write >= cl.epoch) {
        by.report(me, fmt::format("{}: error: shared-memory race in {}: this cluster_load reads "
                                  "bytes of cube {} that it wrote at {} with no sync_cluster "
                                  "between them",
                                  at(file, line), by.where_in(me), c.cube, at(e.file, e.line)));
        return;
      }
      e.remote_read = cl.epoch + 1;
      e.remote_gen = c.m.gen;
      e.remote_reader = static_cast<uint16_t>(by.rank);
    }
    c.remote_read = cl.epoch + 1;
    c.remote_reader = by.rank;
    c.remote_file = file;
    c.remote_line = line;
    return;
  }
  if (how & abi::kAtomic) {
    // An mbarrier's transaction count, completed by a multicast copy: it must have been
    // initialized before a sync_cluster that the copy follows.
    const Shadow& e = c.m.shadow[offset];
    if (e.gen == c.m.gen && e.cluster_write < cl.epoch) return;
    by.report(me, fmt::format("{}: error: {} completes bytes on an mbarrier of cube {} of its "
                              "cluster that {} (sync_cluster after mbarrier_init, before "
                              "another cube's copies complete on it)",
                              at(file, line), by.where_in(me), c.cube,
                              e.gen == c.m.gen
                                  ? fmt::format("was initialized or last updated at {} with no "
                                                "sync_cluster between",
                                                at(e.file, e.line))
                                  : std::string("was never initialized")));
    return;
  }
  ++cl.progress;
  for (uint64_t b = 0; b < bytes; ++b) {
    Shadow& e = c.m.shadow[offset + b];
    const bool read = e.read_gen == c.m.gen && e.cluster_read == cl.epoch;
    const bool written = e.gen == c.m.gen && e.cluster_write == cl.epoch;
    if (read || written || (e.remote_gen == c.m.gen && e.remote_read == cl.epoch + 1)) {
      by.report(me, fmt::format("{}: error: shared-memory race in {}: this tma_load_multicast "
                                "overwrites bytes of cube {} that {} with no sync_cluster between "
                                "them (a multicast may fill another cube's buffer only once that "
                                "cube is done with it)",
                                at(file, line), by.where_in(me), c.cube,
                                written ? fmt::format("it wrote at {}", at(e.file, e.line))
                                        : std::string("it read since the last sync_cluster")));
      return;
    }
    e.gen = c.m.gen;
    e.epoch = c.epoch;
    e.warp_epoch = c.warp_epoch[0];
    e.writer = 1;  // unit 0, which issues the cube's copies
    e.wclock = c.by_phases ? c.clock_of(0)[0] : 0;
    e.cluster_write = cl.epoch;
    e.file = file;
    e.line = line;
    e.read_gen = 0;
  }
}

// Every unit of cube c has returned: no other cube of the cluster may still read its shared
// memory.
void cube_exited(Cube& c) {
  if (c.remote_read != c.cl.epoch + 1 || c.fault) return;
  Cube& by = *c.cl.cubes[c.remote_reader];
  by.report(0, fmt::format("{}: error: cube {} of kernel '{}' returned while cube {} of its "
                           "cluster may still read its shared memory through this cluster_load "
                           "(on a GPU the memory is gone): sync_cluster after the last "
                           "cluster_load, before the kernel ends",
                           at(c.remote_file, c.remote_line), c.cube, c.L.kernel, by.cube));
}

}  // namespace kiln::detail::emu
