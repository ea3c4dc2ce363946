// DecodeLaneChoice (backend/decode-lane-choice.h): both forms tried before one is kept, the
// faster kept for each row count on its own, the slower rechecked at doubling intervals, a trial
// that finds the host changed switching forms, and the median deciding where some steps are
// preempted. Step costs are given, not timed.
#include "backend/decode-lane-choice.h"

#include <gtest/gtest.h>

#include <functional>

namespace hearth {
namespace {

using Choice = DecodeLaneChoice;

// Runs `steps` steps of `rows`, each costing cost(lanes); returns how many took lanes.
int run_steps(Choice& c, int64_t rows, int steps, const std::function<double(int)>& cost) {
  int with_lanes = 0;
  for (int i = 0; i < steps; ++i) {
    const int lanes = c.choose(rows);
    EXPECT_TRUE(lanes == 1 || lanes == 2) << lanes;
    with_lanes += lanes > 1;
    c.took(rows, lanes, cost(lanes));
  }
  return with_lanes;
}

// The first trial: kTrialSteps timed steps of each form, plus each form's uncounted first.
constexpr int kFirstTrial = 2 * Choice::kTrialSteps + 2;

TEST(DecodeLaneChoice, TriesBothFormsThenKeepsTheFaster) {
  Choice c(2);
  const auto lanes_faster = [](int lanes) { return lanes > 1 ? 0.8e-3 : 1.0e-3; };
  EXPECT_EQ(run_steps(c, 8, kFirstTrial, lanes_faster), kFirstTrial / 2);
  // Then lanes, but for the rechecks' steps of one pass (trials at doubling intervals, and at
  // least 50 x 8 x 0.25 = 100 steps apart).
  const int steps = 1000;
  const int lanes = run_steps(c, 8, steps, lanes_faster);
  EXPECT_GT(lanes, steps - 5 * Choice::kTrialSteps);
  EXPECT_LT(lanes, steps);  // the slower form is still rechecked now and then
}

TEST(DecodeLaneChoice, KeepsOnePassWhereLanesLose) {
  Choice c(2);
  const auto lanes_slower = [](int lanes) { return lanes > 1 ? 2.0e-3 : 1.0e-3; };
  run_steps(c, 8, kFirstTrial, lanes_slower);
  // Rechecks at least 50 x 8 x (2 - 1) = 400 steps apart: a few trials' lane steps in 2,000.
  const int lanes = run_steps(c, 8, 2000, lanes_slower);
  EXPECT_GE(lanes, Choice::kTrialSteps);
  EXPECT_LE(lanes, 6 * Choice::kTrialSteps);
}

TEST(DecodeLaneChoice, EachRowCountChoosesOnItsOwn) {
  Choice c(2);
  // Lanes win at 8 rows and lose at 4.
  const auto at8 = [](int lanes) { return lanes > 1 ? 0.5e-3 : 1.0e-3; };
  const auto at4 = [](int lanes) { return lanes > 1 ? 1.0e-3 : 0.5e-3; };
  run_steps(c, 8, kFirstTrial, at8);
  run_steps(c, 4, kFirstTrial, at4);
  EXPECT_GE(run_steps(c, 8, 30, at8), 30);
  EXPECT_EQ(run_steps(c, 4, 30, at4), 0);
}

TEST(DecodeLaneChoice, FollowsAHostWhoseCostsChange) {
  Choice c(2);
  bool lanes_win = false;
  const auto cost = [&](int lanes) { return (lanes > 1) == lanes_win ? 0.5e-3 : 1.0e-3; };
  run_steps(c, 8, 3000, cost);  // one pass wins; the rechecks back off to their longest
  lanes_win = true;
  // Within one recheck interval and a trial, lanes are found and kept (a later trial may fall
  // in the last 30 steps: at most kTrialSteps of them one pass).
  run_steps(c, 8, int(Choice::kMaxRecheck) + kFirstTrial, cost);
  EXPECT_GE(run_steps(c, 8, 30, cost), 30 - Choice::kTrialSteps);
}

TEST(DecodeLaneChoice, AMuchSlowerFormIsTriedRarely) {
  Choice c(16);
  // Sixteen lanes of a model whose weights stream from memory: each lane step 16x slower.
  const auto cost = [](int lanes) { return lanes > 1 ? 16.0e-3 : 1.0e-3; };
  int with_lanes = 0;
  for (int i = 0; i < kFirstTrial + 10000; ++i) {
    const int lanes = c.choose(8);
    with_lanes += lanes > 1;
    c.took(8, lanes, cost(lanes));
  }
  // The first trial's 9, then trials >= 50 x 8 x 15 = 6,000 steps apart: one more at most.
  EXPECT_LE(with_lanes, kFirstTrial / 2 + Choice::kTrialSteps);
}

TEST(DecodeLaneChoice, TheFirstStepOfAFormIsNotCounted) {
  Choice c(2);
  // Each form's first step is slow (it allocates its scratch); one pass is faster after that.
  int seen[2] = {0, 0};
  const auto cost = [&](int lanes) {
    const int f = lanes > 1;
    return seen[f]++ == 0 ? 1.0 : (f ? 1.0e-3 : 0.5e-3);
  };
  run_steps(c, 8, kFirstTrial, cost);
  EXPECT_EQ(run_steps(c, 8, 30, cost), 0);
}

TEST(DecodeLaneChoice, PreemptedStepsDoNotDecide) {
  Choice c(2);
  // Lanes are faster, but three of each eight of their steps are preempted (10x): their mean
  // is the slower one, their median is not.
  int n = 0;
  const auto cost = [&](int lanes) {
    if (lanes == 1) return 1.0e-3;
    return ++n % 8 < 3 ? 8.0e-3 : 0.8e-3;
  };
  run_steps(c, 8, kFirstTrial, cost);
  EXPECT_GE(run_steps(c, 8, 30, cost), 30);
}

}  // namespace
}  // namespace hearth
