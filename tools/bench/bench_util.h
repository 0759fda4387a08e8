// Timing helpers for the benchmark programs: medians of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace kiln::bench {

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

}  // namespace kiln::bench
