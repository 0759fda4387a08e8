// Helpers for the benchmark programs: medians of repeated runs, and stopping with a message.
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ir/result.h"

namespace kiln::bench {

// A benchmark that cannot measure what it claims stops, saying why (a benchmark program, not
// library code).
[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}
template <class T>
T must(Result<T> r) {
  if (!r) die(r.error().message);
  return std::move(*r);
}
inline void must(const Status& s) {
  if (!s) die(s.error().message);
}

// Runs `f` `reps` times per sample and returns the median seconds per call over `samples`.
template <class F>
double median_seconds(F&& f, int reps, int samples = 15) {
  std::vector<double> t;
  for (int s = 0; s < samples; ++s) {
    const auto a = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) f();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count() / reps);
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

// The largest difference between two results, relative to the largest magnitude of `want`.
inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(want[i])));
  }
  return err / std::max(mag, 1e-30);
}

}  // namespace kiln::bench
