// The specialization cache (internal to the runtime).
//
// Fast path: a launch writes its key (instantiation, each argument's descriptor, comptime
// values, cube size, target, options) into a fixed buffer, with no tracing, no allocation and
// no IR hashing, and looks it up in the kernel's table under a shared lock.
// Slow path, once per key: trace, run the passes, hash the canonical IR with the target,
// options and compiler versions, load from the disk cache or compile and store, write the
// KILN_DUMP stages. Distinct keys compile in parallel; concurrent launches of one new key wait
// for a single compile. Failures are kept too: the same key fails the same way.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "compiler/backend.h"
#include "compiler/dsl/registry.h"
#include "runtime/compile_report.h"
#include "runtime/device.h"

namespace kiln::detail {

struct SpecKey {
  static constexpr size_t kCapacity = 240;
  std::array<uint8_t, kCapacity> bytes{};
  uint32_t size = 0;
  uint64_t hash = 0;
  bool overflow = false;

  template <class T>
  void put(const T& v) {
    put_bytes(&v, sizeof v);
  }
  void put_bytes(const void* p, size_t n) {
    if (size + n > kCapacity) {
      overflow = true;
      return;
    }
    std::memcpy(bytes.data() + size, p, n);
    size += static_cast<uint32_t>(n);
  }
  void finish();  // computes `hash`
  friend bool operator==(const SpecKey& a, const SpecKey& b) {
    return a.size == b.size && std::memcmp(a.bytes.data(), b.bytes.data(), a.size) == 0;
  }
};
struct SpecKeyHash {
  size_t operator()(const SpecKey& k) const { return static_cast<size_t>(k.hash); }
};

struct Spec {
  enum class State { Compiling, Ready, Failed };
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<State> state{State::Compiling};  // Ready is published after `code` is set
  std::shared_ptr<const LoadedKernel> code;    // what the device runs
  // Bit i: runtime parameter i is indexed flat somewhere (it takes only dense row-major
  // views) / is written (its view must not overlap itself). From ir::view_use of the trace.
  uint64_t flat_params = 0;
  uint64_t written_params = 0;
  Error error;
};

struct SpecTable {
  std::shared_mutex mu;
  std::unordered_map<SpecKey, std::unique_ptr<Spec>, SpecKeyHash> map;
};

// The table of a registered kernel (one per kernel, for the whole process).
SpecTable* table_for(const dsl::KernelDef* def);

// Everything the slow path needs to build a specialization for a device: its target names the
// backend that compiles it.
struct BuildRequest {
  const dsl::KernelDef* def = nullptr;
  const dsl::Instantiation* inst = nullptr;
  dsl::TraceRequest trace;
  backend::Options options;
  std::shared_ptr<Device> device;
};

// The fast path: the ready specialization for `key`, or null.
const Spec* find_ready(SpecTable& table, const SpecKey& key);

// The slow path: the specialization for `key`, built from `req` if it is new (exactly once per
// key; concurrent callers wait for that build).
Result<const Spec*> get_or_build(SpecTable& table, const SpecKey& key, const BuildRequest& req);

}  // namespace kiln::detail
