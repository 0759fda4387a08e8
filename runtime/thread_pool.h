// The CPU thread pool: persistent workers that share the cubes of a launch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

// One worker per hardware thread beyond the caller's (the calling thread takes part in every
// job). Work is handed out in chunks by an atomic counter. After a job, workers spin briefly
// for the next one (back-to-back launches), then sleep; an idle pool burns no CPU.
// Safe to use from many threads: one job runs at a time, and a caller that finds the pool busy
// runs its job on its own thread instead of waiting.
class ThreadPool {
 public:
  // `threads` counts the calling thread: 1 means no workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool: KILN_NUM_THREADS threads if set, else one per hardware thread.
  static ThreadPool& global();

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) in chunks of `chunk` items, on the workers and the calling
  // thread; returns when every chunk is done.
  using ChunkFn = std::function<void(uint32_t begin, uint32_t end)>;
  void parallel_for(uint32_t n, uint32_t chunk, const ChunkFn& fn);

 private:
  struct Job {
    const ChunkFn* fn = nullptr;
    uint32_t n = 0;
    uint32_t chunk = 1;
    std::atomic<uint32_t> next{0};
    std::atomic<int> active{0};  // participants that joined and are still working
  };
  void worker_main();
  static void run_chunks(Job& job);

  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  Job* job_ = nullptr;
  bool stop_ = false;
};

}  // namespace kiln
