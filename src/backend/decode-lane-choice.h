// Which form a CPU decode step of several sequences takes, chosen by timing both as the steps
// come: one pass over every row (each op handed out to the pool: a join an op), or lanes (a group
// of sequences a thread, joined once a step; Backend::decode_lanes). Lanes win where the weights
// stay in the caches (kjv-13m, 13 MB: each lane reads them again, and the ~40 joins a step they
// save are the cost); they lose where a step streams its weights from memory. No cache size read
// from the machine decides it: a guest's CPUID reports what its host has, not what one core sees.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace hearth {

class DecodeLaneChoice {
 public:
  // lanes: the form's lane count (>= 2).
  explicit DecodeLaneChoice(int lanes) : lanes_(lanes) {}

  // The lane count for the next step of `rows` sequences: 1 or lanes.
  int choose(int64_t rows);
  // What a step of `rows` that took `lanes` cost, in seconds.
  void took(int64_t rows, int lanes, double seconds);

  // A trial alternates the two forms for 2 x kTrialSteps steps and keeps the one whose median
  // step was shorter: alternating, so both see the same host (a shared host's speed moves by
  // tens of percent within seconds), and medians, so a step the host preempted does not decide.
  // The first trial starts at once; the next after kFirstRecheck steps, then twice as many each
  // time the choice stands (at most kMaxRecheck, or later where the slower form is much slower):
  // a host whose load changes is followed, at a few percent of the time at most.
  static constexpr int kTrialSteps = 8;
  static constexpr int64_t kFirstRecheck = 32;
  static constexpr int64_t kMaxRecheck = 2048;
  // And never sooner than this many steps per step of extra cost a trial adds (~2% of the time).
  static constexpr int64_t kStepsPerTrialCost = 50;
  static constexpr int64_t kMaxRows = 64;  // row counts above share one record

 private:
  struct Form {
    std::array<double, kTrialSteps> seconds{};
    int n = 0;            // samples in this trial
    bool warmed = false;  // its first step ever (which may allocate) is not counted
  };
  struct Rows {
    Form form[2];           // [0]: one pass, [1]: lanes
    bool in_trial = false;  // a trial's steps are being timed
    int best = 0;
    int64_t steps = 0, next_trial = 0, recheck = kFirstRecheck;
  };
  Rows& at(int64_t rows) { return rows_[size_t(rows < kMaxRows ? rows : kMaxRows)]; }
  static double median(Form& f);

  int lanes_;
  std::mutex mu_;  // sessions sharing one backend step from their own threads
  std::array<Rows, kMaxRows + 1> rows_{};
};

}  // namespace hearth
