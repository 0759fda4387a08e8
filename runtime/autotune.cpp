// The autotuner (autotune.h): a table in memory, entries of kind "tune" in the disk cache, and
// the measurements, under a lock that tuners of one key share across threads and processes.
#include "runtime/autotune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/disk_cache.h"
#include "runtime/log.h"
#include "runtime/runtime.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0"
#endif

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;  // the table and the stats; tuning itself holds `tuning`
  std::mutex tuning;
  std::optional<AutotuneMode> forced;
  std::map<std::string, size_t, std::less<>> table;  // material -> winner
  AutotuneStats stats;
};
State& state() {
  static auto* s = new State;
  return *s;
}

thread_local std::optional<TuneReport> t_last;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Everything the winner depends on: the tuner's and kiln's versions, the device, the request,
// and the mode (a full tuning measured more candidates than a fast one).
std::string material(const Runtime& rt, const TuneRequest& r, AutotuneMode mode) {
  const DeviceInfo& d = rt.device();
  std::string m = fmt::format(
      "kiln tune 1\nkiln {}\nop {}\ndevice {} | {} | {} | {} cores | {}-bit vectors\nkey {}\n"
      "mode {}\ncandidates",
      KILN_VERSION, r.op, d.name, d.description, d.arch, d.cores, d.vector_bits, r.key,
      autotune_mode_name(mode));
  for (const std::string& c : r.candidates) m += "\n  " + c;
  return m;
}

std::optional<size_t> index_of(const TuneRequest& r, std::string_view text) {
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (r.candidates[i] == text) return i;
  return std::nullopt;
}

// The winner recorded in the disk cache for `m`, if any.
std::optional<size_t> from_disk(DiskCache& cache, const TuneRequest& r, const std::string& m) {
  auto e = cache.load("tune", strong_hash(m), m);
  if (!e) return std::nullopt;
  return index_of(r, std::string_view(e->blob.data(), e->blob.size()));
}

// Measures the candidates: a warm-up run of each (which compiles), then rounds of one run of
// every candidate, the best time of each kept. Rounds rather than one candidate's runs after
// another: a machine that slows down for a while (another process, a noisy VM) slows every
// candidate alike instead of the one that happened to run then.
TuneOutcome measure(const TuneRequest& r, AutotuneMode mode, const std::string& what) {
  TuneOutcome out;
  out.source = TuneOutcome::Source::Measured;
  const size_t count =
      mode == AutotuneMode::Full ? r.candidates.size() : std::min(r.fast, r.candidates.size());
  out.ms.assign(r.candidates.size(), -1.0);
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  const int rounds = mode == AutotuneMode::Full ? 5 : 3;
  const auto start = Clock::now();
  auto once = [&](size_t i) -> std::optional<double> {
    {
      std::lock_guard<std::mutex> lock(state().mu);
      ++state().stats.runs;
    }
    const auto t = Clock::now();
    if (!r.run(i)) return std::nullopt;
    return ms_since(t);
  };
  std::vector<bool> alive(count, false);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0 && ms_since(start) > r.budget_ms) break;  // later candidates are not started
    if (terminal)
      std::fprintf(stderr, "\rkiln: tuning %s: candidate %zu of %zu\033[K", what.c_str(), i + 1,
                   count);
    alive[i] = once(i).has_value();  // a failed warm-up rules it out
  }
  for (int round = 0; round < rounds; ++round) {
    if (round > 0 && ms_since(start) > r.budget_ms) break;
    if (terminal)
      std::fprintf(stderr, "\rkiln: tuning %s: round %d of %d\033[K", what.c_str(), round + 1,
                   rounds);
    for (size_t i = 0; i < count; ++i) {
      if (!alive[i]) continue;
      const auto t = once(i);
      if (!t) {
        alive[i] = false;
        out.ms[i] = -1;
        continue;
      }
      out.ms[i] = out.ms[i] < 0 ? *t : std::min(out.ms[i], *t);
    }
  }
  if (terminal) std::fprintf(stderr, "\r\033[K");
  size_t winner = 0;
  for (size_t i = 0; i < out.ms.size(); ++i)
    if (out.ms[i] >= 0 && (out.ms[winner] < 0 || out.ms[i] < out.ms[winner])) winner = i;
  out.index = winner;
  return out;
}

TuneOutcome autotune_key(Runtime& rt, const TuneRequest& r, AutotuneMode mode);

}  // namespace

const char* autotune_mode_name(AutotuneMode mode) {
  switch (mode) {
    case AutotuneMode::Off:
      return "off";
    case AutotuneMode::Fast:
      return "fast";
    case AutotuneMode::Full:
      return "full";
  }
  return "?";
}

std::optional<AutotuneMode> parse_autotune_mode(std::string_view text) {
  if (text == "off") return AutotuneMode::Off;
  if (text == "fast") return AutotuneMode::Fast;
  if (text == "full") return AutotuneMode::Full;
  return std::nullopt;
}

AutotuneMode autotune_mode() {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    if (state().forced) return *state().forced;
  }
  const char* env = std::getenv("KILN_AUTOTUNE");
  if (!env || !*env) return AutotuneMode::Fast;
  if (auto m = parse_autotune_mode(env)) return *m;
  log_warning_once(
      "KILN_AUTOTUNE",
      fmt::format("KILN_AUTOTUNE={} is not off, fast or full; tuning in fast mode", env));
  return AutotuneMode::Fast;
}

void set_autotune_mode(std::optional<AutotuneMode> mode) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().forced = mode;
}

AutotuneStats autotune_stats() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().stats;
}

std::optional<TuneReport> last_tune_report() {
  return t_last;
}

TuneOutcome autotune(Runtime& rt, const TuneRequest& r) {
  const AutotuneMode mode = autotune_mode();
  if (mode == AutotuneMode::Off || r.candidates.size() <= 1) return {};
  TuneOutcome out = autotune_key(rt, r, mode);
  t_last = TuneReport{r.op, r.key, r.candidates, out};
  return out;
}

namespace {

TuneOutcome autotune_key(Runtime& rt, const TuneRequest& r, AutotuneMode mode) {
  // Full tunings serve fast mode too; fast ones only fast mode.
  std::vector<std::string> materials{material(rt, r, AutotuneMode::Full)};
  if (mode == AutotuneMode::Fast) materials.push_back(material(rt, r, AutotuneMode::Fast));
  auto remembered = [&]() -> std::optional<size_t> {
    std::lock_guard<std::mutex> lock(state().mu);
    for (const std::string& m : materials)
      if (auto it = state().table.find(m); it != state().table.end()) return it->second;
    return std::nullopt;
  };
  // A winner found on disk under material `m`, kept in memory under the same.
  auto remember = [&](size_t index, const std::string& m) -> TuneOutcome {
    std::lock_guard<std::mutex> lock(state().mu);
    state().table[m] = index;
    ++state().stats.disk_hits;
    return {index, TuneOutcome::Source::Disk, {}};
  };
  if (auto i = remembered()) {
    std::lock_guard<std::mutex> lock(state().mu);
    ++state().stats.memory_hits;
    return {*i, TuneOutcome::Source::Memory, {}};
  }
  // One tuning at a time in this process, and one per key across processes: whoever waited
  // finds the winner of whoever measured.
  std::lock_guard<std::mutex> tuning(state().tuning);
  if (auto i = remembered()) return {*i, TuneOutcome::Source::Memory, {}};
  auto cache = DiskCache::global();
  auto look = [&]() -> std::optional<TuneOutcome> {
    for (const std::string& m : materials)
      if (auto i = from_disk(*cache, r, m)) return remember(*i, m);
    return std::nullopt;
  };
  if (auto found = look()) return *found;
  const std::string& mine = materials.back();  // what this mode stores
  const DiskCache::Lock held = cache->lock("tune", strong_hash(mine));
  if (held.held())
    if (auto found = look()) return *found;
  const std::string what = fmt::format("{} ({})", r.op, r.key);
  TuneOutcome out = measure(r, mode, what);
  {
    std::lock_guard<std::mutex> lock(state().mu);
    ++state().stats.measured;
    state().table[mine] = out.index;
  }
  nlohmann::json meta = {{"kernel", r.op},
                         {"tuned", r.key},
                         {"winner", r.candidates[out.index]},
                         {"mode", autotune_mode_name(mode)},
                         {"device", rt.device().description}};
  nlohmann::json times = nlohmann::json::object();
  for (size_t i = 0; i < out.ms.size(); ++i)
    if (out.ms[i] >= 0) times[r.candidates[i]] = out.ms[i];
  meta["ms"] = times;
  const std::string& winner = r.candidates[out.index];
  if (Status st = cache->store("tune", strong_hash(mine), mine, meta.dump(),
                               std::span<const char>(winner.data(), winner.size()));
      !st)
    log_warning_once(
        "tune store " + cache->dir(),
        fmt::format("the tuning of {} is not kept on disk: {}", what, st.error().message));
  return out;
}

}  // namespace

}  // namespace kiln
