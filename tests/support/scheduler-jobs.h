// Jobs for the scheduler's tests (tests/unit/runtime, tests/golden): a request of a prompt
// (EOS ignored, so it runs max_tokens), and a bounded wait for its end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/scheduler.h"

namespace hearth::test {

inline std::shared_ptr<Job> scheduler_job(const std::vector<int32_t>& prompt, int max_tokens,
                                          float temperature = 0, uint64_t seed = 0xFFFFFFFF) {
  auto j = std::make_shared<Job>();
  j->prompt = prompt;
  j->generate.max_tokens = max_tokens;
  j->generate.ignore_eos = true;
  j->generate.sampling.temperature = temperature;
  j->generate.sampling.seed = seed;
  return j;
}

// Waits (at most two minutes) for the job to finish; returns its text.
inline std::string finish_job(Job& j) {
  using namespace std::chrono_literals;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!j.wait_text(50ms, &text))
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "job did not finish in time";
      j.cancel();
      break;
    }
  return text;
}

}  // namespace hearth::test
