// Where a top-k or top-p stage cuts the candidates, found without sorting them: a histogram of
// the logits picks the bucket the cut falls in, and only that bucket is refined (then sorted once
// it is small). O(n) per call, allocation only when the set grows. A stage with a new target
// (a count, a probability mass) needs only the weights it adds up.
#pragma once

#include <cstdint>
#include <vector>

namespace hearth::sampling {

// Candidates as parallel arrays in ascending id order; weight null means 1 each (a count).
struct CandidateSpan {
  const float* logit;
  const int32_t* id;
  const float* weight;
  int64_t n;
};

// The last element kept in (logit descending, id ascending) order, or the whole set.
struct Cutoff {
  float logit = 0;
  int32_t id = 0;
  bool keep_all = true;
  bool keeps(float l, int32_t i) const { return keep_all || l > logit || (l == logit && i <= id); }
};

class CutoffFinder {
 public:
  // Walking `set` in (logit descending, id ascending) order and adding up the weights, the
  // first element at which the sum reaches `target` (so at least one element is kept);
  // keep_all when the whole set's sum stays below it. set_max: the set's largest logit (finite).
  Cutoff find(const CandidateSpan& set, double target, float set_max);

 private:
  struct Group {  // one refinement level's elements, ascending id
    std::vector<float> logit, weight;
    std::vector<int32_t> id;
  };
  struct Entry {
    float logit, weight;
    int32_t id;
  };
  Group groups_[2];
  std::vector<Entry> small_;
};

}  // namespace hearth::sampling
