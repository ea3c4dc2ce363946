// A persistent thread pool for data-parallel loops: workers spin briefly then sleep, so a decode
// step's many small parallel_for calls do not pay a thread wake-up each.
// Jobs are passed as FunctionRef (no allocation per call): the callable must outlive the call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>  // (callers that still hold std::function rely on it)
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace hearth {

// A non-owning reference to a callable: what std::function would be without its heap copy.
// A decode step makes a few hundred pool calls; each std::function of a lambda capturing more
// than two references allocated.
template <typename Sig>
class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

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
  void run(FunctionRef<void(int, int)> fn);

  // Splits [0, n) into contiguous chunks of at least `grain`, one per thread, and waits.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const FunctionRef<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers blocked on wake_: only then does run() notify
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  // Serialises callers: a pool shared by two sessions runs one job at a time, never interleaved.
  std::mutex run_mutex_;
};

// Hardware threads usable by this process (affinity-aware).
int available_cpu_count();

}  // namespace hearth
