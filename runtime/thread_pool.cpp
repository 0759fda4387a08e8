// Thread pool. A job is published by bumping `generation_`; workers spin on it for a short
// while after each job, then wait on the condition variable.
#include "runtime/thread_pool.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "runtime/log.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {

namespace {

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// How long a worker keeps looking for the next job before sleeping.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("KILN_NUM_THREADS"); env && *env) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(env, &end, 10);
      if (errno == 0 && end && *end == '\0' && v >= 1 && v <= 1024)
        n = static_cast<int>(v);
      else
        log_warning(
            fmt::format("KILN_NUM_THREADS='{}' is not a thread count from 1 to 1024; "
                        "using {} (one per hardware thread)",
                        env, std::max(n, 1)));
    }
    return new ThreadPool(std::max(n, 1));  // never destroyed: workers may outlive statics
  }();
  return *pool;
}

void ThreadPool::run_chunks(Job& job) {
  for (;;) {
    const uint32_t begin = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
    if (begin >= job.n) break;
    const uint32_t end =
        begin + job.chunk < job.n && begin + job.chunk > begin ? begin + job.chunk : job.n;
    (*job.fn)(begin, end);
  }
}

void ThreadPool::parallel_for(uint32_t n, uint32_t chunk, const ChunkFn& fn) {
  if (n == 0) return;
  if (chunk == 0) chunk = 1;
  // No workers, a single chunk, or the pool busy with another caller's job: run here.
  std::unique_lock<std::mutex> job_lock(job_mu_, std::defer_lock);
  if (workers_.empty() || n <= chunk || !job_lock.try_lock()) {
    for (uint32_t b = 0; b < n; b += chunk) fn(b, b + chunk < n && b + chunk > b ? b + chunk : n);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.active.store(1);  // the caller; workers join under mu_
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(job);
  {
    // Closed: a worker waking late finds no job, so only those that joined are waited for.
    std::lock_guard<std::mutex> lock(mu_);
    job_ = nullptr;
  }
  job.active.fetch_sub(1, std::memory_order_acq_rel);
  while (job.active.load(std::memory_order_acquire) != 0) cpu_relax();
}

void ThreadPool::worker_main() {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while, then sleep until the generation changes.
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    while (generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until)
      cpu_relax();
    Job* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
      job = job_;
      if (job) job->active.fetch_add(1, std::memory_order_acq_rel);  // joined
    }
    if (!job) continue;
    run_chunks(*job);
    job->active.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kiln
