// Autotuning: an operation with several configurations that compute the same result (blockings
// of a matrix product) names them as candidates under a key (the device, the operation, the
// types and a bucket of shapes); the first use of a key measures them and keeps the fastest,
// in memory and in the disk cache next to the compiled kernels (entries of kind "tune"), so that
// every later use, in this process or another, takes it without measuring. docs/runtime.md,
// "Autotuning".
//
// KILN_AUTOTUNE=off    the first candidate (the operation's own heuristic), nothing measured
//               fast   (the default) the operation's short list of candidates
//               full   every candidate (`kiln tune` asks for this)
// A key tuned in full mode serves fast mode too; one tuned fast is tuned again in full mode.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/result.h"

namespace kiln {

class Runtime;

enum class AutotuneMode { Off, Fast, Full };
const char* autotune_mode_name(AutotuneMode mode);
std::optional<AutotuneMode> parse_autotune_mode(std::string_view text);
// The process's mode: set_autotune_mode's, else KILN_AUTOTUNE's (a value it cannot read is
// reported once and taken as fast).
AutotuneMode autotune_mode();
void set_autotune_mode(std::optional<AutotuneMode> mode);

struct TuneRequest {
  std::string op;   // "matmul"
  std::string key;  // what the winner depends on besides the device: "f32->f32 m=1024 n=..."
  // Each candidate as text ("mc=96 nb=256 kc=256"), the operation's default first. The winner
  // is stored by its text, so a candidate keeps its text for as long as it means the same.
  std::vector<std::string> candidates;
  size_t fast = 4;          // how many of the first candidates fast mode measures
  double budget_ms = 3000;  // no candidate or round is started past this (the best so far wins)
  // Runs candidate i once and waits for it (the tuner times it). An error rules it out.
  std::function<Status(size_t)> run;
};

struct TuneOutcome {
  size_t index = 0;  // the candidate to use
  enum class Source { Default, Memory, Disk, Measured } source = Source::Default;
  std::vector<double> ms;  // Measured: each candidate's best time (-1: not run or failed)
};

// The candidate to use for `request` on `rt`'s device. Never fails: when nothing can be
// measured the first candidate is used (and the failures are the operation's to report when it
// runs). Safe to call from several threads and processes at once: tuners of one key wait for
// each other and agree on one winner.
TuneOutcome autotune(Runtime& rt, const TuneRequest& request);

// The latest autotune() call of this thread that was not Off: what `kiln tune` prints.
struct TuneReport {
  std::string op, key;
  std::vector<std::string> candidates;
  TuneOutcome outcome;
};
std::optional<TuneReport> last_tune_report();

// What this process's tuner has done (tests count measurements with it).
struct AutotuneStats {
  uint64_t measured = 0;     // keys whose candidates were measured
  uint64_t runs = 0;         // candidate runs, warm-ups included
  uint64_t disk_hits = 0;    // keys found in the disk cache
  uint64_t memory_hits = 0;  // keys found in memory
};
AutotuneStats autotune_stats();

}  // namespace kiln
