// ThreadPool: generation counter + spin-then-sleep workers. A worker that finds no new job
// after kSpinIterations sleeps on a condition variable; run() pays the lock + notify only then.
#include "base/thread-pool.h"

#include <sched.h>

#include <algorithm>

namespace hearth {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
constexpr int kSpinIterations = 20000;
// Every this many spins a waiting thread offers its core to the scheduler: when threads
// outnumber free cores (a server's HTTP threads and its clients next to a pool as wide as the
// machine), the thread being waited for may sit preempted while its partner spins out a whole
// time slice. sched_yield returns at once when nothing else wants the core.
constexpr int kSpinsPerYield = 4096;
inline void wait_a_little(int spin) {
  if (spin % kSpinsPerYield == kSpinsPerYield - 1)
    sched_yield();
  else
    cpu_relax();
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      wait_a_little(spin);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      // seq_cst on both sides (here: sleepers_ then generation_; run(): generation_ then
      // sleepers_): either run() sees this sleeper and notifies under the mutex, or this
      // predicate sees the new generation. No wake-up is lost.
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(FunctionRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> serial(run_mutex_);
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1);  // seq_cst: pairs with the sleeper check in worker_loop
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);  // a sleeper is either waiting or will see gen
    wake_.notify_all();
  }
  fn(0, n_threads_);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) wait_a_little(spin);
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = int(std::min<int64_t>(n_threads_, max_chunks));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t, int) {
    if (t >= threads) return;
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  });
}

int available_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace hearth
