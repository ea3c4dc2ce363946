#include "runtime/job-notifier.h"

namespace hearth {

void JobNotifier::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  running_ = true;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

bool JobNotifier::post(Call call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_ || stopping_) return false;
  queued_.push_back(std::move(call));
  return true;
}

void JobNotifier::flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_.empty()) return;
    if (flushed_.empty()) {
      flushed_.swap(queued_);
    } else {
      flushed_.insert(flushed_.end(), queued_.begin(), queued_.end());
      queued_.clear();
    }
  }
  cv_.notify_one();
}

void JobNotifier::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return;
    stopping_ = true;
    flushed_.insert(flushed_.end(), queued_.begin(), queued_.end());
    queued_.clear();
  }
  cv_.notify_one();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
}

void JobNotifier::loop() {
  std::vector<Call> batch;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !flushed_.empty(); });
      if (flushed_.empty()) return;  // stopping, and everything ran
      batch.swap(flushed_);
    }
    for (const Call& call : batch) (*call)();
    batch.clear();  // a job's last call may hold the job's consumer state: drop it here
  }
}

}  // namespace hearth
