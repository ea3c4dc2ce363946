// DecodeLaneChoice (backend/decode-lane-choice.h): each row count's trials and the form they chose.
#include "backend/decode-lane-choice.h"

#include <algorithm>

namespace hearth {

double DecodeLaneChoice::median(Form& f) {
  std::sort(f.seconds.begin(), f.seconds.begin() + f.n);
  return f.n % 2 ? f.seconds[size_t(f.n / 2)]
                 : (f.seconds[size_t(f.n / 2 - 1)] + f.seconds[size_t(f.n / 2)]) / 2;
}

int DecodeLaneChoice::choose(int64_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  Rows& r = at(rows);
  ++r.steps;
  if (!r.in_trial && r.steps >= r.next_trial) {
    r.in_trial = true;
    r.form[0].n = r.form[1].n = 0;
  }
  if (!r.in_trial) return r.best ? lanes_ : 1;
  // Alternate: the form with fewer samples (a first step ever is not one: that form goes again).
  return r.form[1].n < r.form[0].n ? lanes_ : 1;
}

void DecodeLaneChoice::took(int64_t rows, int lanes, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Rows& r = at(rows);
  Form& f = r.form[lanes > 1 ? 1 : 0];
  if (!f.warmed) {
    f.warmed = true;
    return;
  }
  if (!r.in_trial || f.n >= kTrialSteps) return;
  f.seconds[size_t(f.n++)] = seconds;
  if (r.form[0].n < kTrialSteps || r.form[1].n < kTrialSteps) return;
  const double pass = median(r.form[0]), lanes_s = median(r.form[1]);
  const int best = lanes_s < pass ? 1 : 0;
  r.recheck = best == r.best ? std::min(r.recheck * 2, kMaxRecheck) : kFirstRecheck;
  r.best = best;
  r.in_trial = false;
  // A trial's steps of the slower form cost kTrialSteps x (slower / faster - 1) steps of the
  // faster: the next comes late enough that they stay a small share of the time (lanes over 16
  // threads of a model that streams its weights: ~16x slower steps, a trial every ~6,000 steps).
  const double slower = std::max(pass, lanes_s) / std::max(std::min(pass, lanes_s), 1e-12);
  const auto spaced = int64_t(kStepsPerTrialCost * kTrialSteps * (slower - 1));
  r.next_trial = r.steps + std::max(r.recheck, spaced);
}

}  // namespace hearth
