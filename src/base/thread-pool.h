// A persistent thread pool for data-parallel loops: workers spin briefly then sleep, so a decode
// step's many small parallel_for calls do not pay a thread wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(2) starts one worker.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread (the caller is thread 0) and waits.
  // The function decides its own split, so kernels can partition rows without stragglers.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain`, one per thread, and waits.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  // Serialises callers: a pool shared by two sessions runs one job at a time, never interleaved.
  std::mutex run_mutex_;
};

// Hardware threads usable by this process (affinity-aware).
int available_cpu_count();

}  // namespace hearth
