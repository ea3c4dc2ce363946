// JobNotifier: queued listener calls run on its thread, in order, only after a flush; stop()
// runs what is queued and post() then refuses, so the caller runs a late call itself.
#include "runtime/job-notifier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {
namespace {

using namespace std::chrono_literals;

JobNotifier::Call make_call(std::function<void()> fn) {
  return std::make_shared<const std::function<void()>>(std::move(fn));
}

TEST(JobNotifier, RunsFlushedCallsInOrderOffTheCallersThread) {
  JobNotifier n;
  n.start();
  std::mutex mu;
  std::vector<int> seen;
  std::atomic<bool> off_thread{true};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(n.post(make_call([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(i);
      if (std::this_thread::get_id() == caller) off_thread = false;
    })));
    if (i % 10 == 9) n.flush();  // several batches, as several steps
  }
  n.stop();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[size_t(i)], i);
  EXPECT_TRUE(off_thread);
}

TEST(JobNotifier, WaitsForAFlushAndStopRunsWhatIsQueued) {
  JobNotifier n;
  n.start();
  std::atomic<int> ran{0};
  ASSERT_TRUE(n.post(make_call([&] { ran++; })));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ran.load(), 0);  // queued, not flushed
  n.flush();
  for (int i = 0; i < 200 && ran.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(ran.load(), 1);
  ASSERT_TRUE(n.post(make_call([&] { ran++; })));
  n.stop();  // never flushed: stop runs it
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(n.post(make_call([&] { ran++; })));  // the caller runs it
  EXPECT_EQ(ran.load(), 2);
}

TEST(JobNotifier, DropsACallsStateAfterRunningIt) {
  JobNotifier n;
  n.start();
  auto state = std::make_shared<int>(7);
  std::weak_ptr<int> watch = state;
  ASSERT_TRUE(n.post(make_call([state] {})));
  state.reset();
  n.flush();
  n.stop();
  EXPECT_TRUE(watch.expired());  // a job's last listener call lets go of its consumer's state
}

}  // namespace
}  // namespace hearth
