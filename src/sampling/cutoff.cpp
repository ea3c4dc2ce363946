// CutoffFinder: bucket the logits by their distance from the largest, add up each bucket's
// weight, keep every bucket before the one where the sum reaches the target and refine that one.
// Buckets are monotone in the logit (IEEE subtraction and multiplication are), so the order the
// reference sort would walk is preserved exactly; ties inside a bucket stay in id order.
#include "sampling/cutoff.h"

#include <algorithm>
#include <array>

#include "sampling/logit-loops.h"

namespace hearth::sampling {
namespace {

constexpr int kBuckets = 1024;      // finite logits; bucket kBuckets holds the -inf ones
constexpr int64_t kSortBelow = 64;  // a group this small is sorted instead of bucketed

// Bucket of logit x: 0 for the largest (hi), rising with the distance hi - x. scale 0 means
// every finite logit is equal (or the range is too wide for a float): one bucket.
int bucket_of(float x, float hi, float scale) {
  if (x == kNegInf) return kBuckets;
  if (scale == 0.0f) return 0;
  return int(std::min((hi - x) * scale, float(kBuckets - 1)));
}

}  // namespace

Cutoff CutoffFinder::find(const CandidateSpan& set, double target, float set_max) {
  CandidateSpan g = set;
  double before = 0;  // weight of the elements ahead of the current group, all kept
  bool top_level = true;
  for (int level = 0;; ++level) {
    auto weight = [&](int64_t i) { return g.weight ? double(g.weight[i]) : 1.0; };
    if (g.n <= kSortBelow) {
      small_.resize(size_t(g.n));
      for (int64_t i = 0; i < g.n; ++i) small_[size_t(i)] = {g.logit[i], float(weight(i)), g.id[i]};
      std::sort(small_.begin(), small_.end(), [](const Entry& a, const Entry& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
      });
      double sum = before;
      for (const Entry& e : small_) {
        sum += e.weight;
        if (sum >= target) return {e.logit, e.id, false};
      }
      // Rounding left a crossing group just short: it is kept whole (but nothing after it).
      if (top_level || small_.empty()) return {};
      return {small_.back().logit, small_.back().id, false};
    }
    // The first level knows the max and spans 64 nats below it (what lies further down shares
    // the last finite bucket, refined if the cut falls there): one pass fewer over the set.
    const float hi = level == 0 ? set_max : max_value(g.logit, g.n);
    const float lo = level == 0 ? set_max - 64.0f : min_finite_value(g.logit, g.n);
    const float range = hi - lo;
    const float scale = lo < hi && range < std::numeric_limits<float>::infinity()
                            ? float(kBuckets) * (1.0f - 1.0f / 4096) / range
                            : 0.0f;
    // Two histograms, even and odd elements: runs of one bucket would otherwise chain every
    // add through the same memory slot.
    std::array<double, kBuckets + 1> mass{}, odd{};
    int64_t i = 0;
    for (; i + 2 <= g.n; i += 2) {
      mass[size_t(bucket_of(g.logit[i], hi, scale))] += weight(i);
      odd[size_t(bucket_of(g.logit[i + 1], hi, scale))] += weight(i + 1);
    }
    if (i < g.n) mass[size_t(bucket_of(g.logit[i], hi, scale))] += weight(i);
    for (size_t b = 0; b < mass.size(); ++b) mass[b] += odd[b];
    int cross = -1;
    for (int b = 0; b <= kBuckets; ++b) {
      if (before + mass[size_t(b)] >= target) {
        cross = b;
        break;
      }
      before += mass[size_t(b)];
    }
    if (cross < 0) {
      if (top_level) return {};
      cross = kBuckets;  // rounding: keep the group whole
      while (cross > 0 && mass[size_t(cross)] == 0) --cross;
      before -= mass[size_t(cross)];
    }
    // One logit in the bucket (the -inf one, or all equal): id order is the walk order.
    if (cross == kBuckets || scale == 0.0f) {
      double sum = before;
      int64_t last = -1;
      for (int64_t i = 0; i < g.n; ++i) {
        if (bucket_of(g.logit[i], hi, scale) != cross) continue;
        last = i;
        sum += weight(i);
        if (sum >= target) return {g.logit[i], g.id[i], false};
      }
      return {g.logit[last], g.id[last], false};
    }
    Group& next = groups_[level % 2];
    next.logit.clear();
    next.id.clear();
    next.weight.clear();
    for (int64_t i = 0; i < g.n; ++i) {
      if (bucket_of(g.logit[i], hi, scale) != cross) continue;
      next.logit.push_back(g.logit[i]);
      next.id.push_back(g.id[i]);
      if (g.weight) next.weight.push_back(g.weight[i]);
    }
    // hi and lo always land in different buckets, so each level shrinks the group.
    g = {next.logit.data(), next.id.data(), g.weight ? next.weight.data() : nullptr,
         int64_t(next.logit.size())};
    top_level = false;
  }
}

}  // namespace hearth::sampling
