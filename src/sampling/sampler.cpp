// The sampling chain of sampler.h: penalties -> top-k -> top-p -> min-p -> temperature -> draw
// (llama.cpp's default order). Each stage narrows the candidate set (parallel arrays in id
// order) in one pass; top-k and top-p find their cut with CutoffFinder instead of a sort.
// Add a stage as one block in candidates(), in chain order, that narrows (cl, ci, n).
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sampling/logit-loops.h"

namespace hearth {
namespace {

using sampling::Cutoff;

SamplingCandidates picked_without_draw(int64_t id) {
  SamplingCandidates c;
  c.picked = int32_t(id);
  return c;
}

int64_t first_index_of(const float* x, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == v) return i;
  return 0;
}

}  // namespace

bool is_plain_greedy(const SamplingParams& p) {
  return p.temperature <= 0.0f && p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  seed_ = params.seed;
  if (seed_ == 0xFFFFFFFF)
    seed_ = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  rng_.seed(seed_);
}

void Sampler::set_params(const SamplingParams& p) {
  params_ = p;
}

bool Sampler::penalties_apply(std::span<const int32_t> history) const {
  const SamplingParams& p = params_;
  return (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) &&
         p.repeat_last_n != 0 && !history.empty();
}

// llama.cpp semantics: repetition divides positive logits and multiplies negative ones; presence
// subtracts once per seen token, frequency once per occurrence. Only the window's tokens are
// touched; seen_count_ is back to zero on return.
bool Sampler::apply_penalties(int32_t n_vocab, std::span<const int32_t> history) {
  if (!penalties_apply(history)) return false;
  const SamplingParams& p = params_;
  const bool rep = p.repeat_penalty != 1.0f;
  size_t n = history.size();
  if (p.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p.repeat_last_n));
  seen_ids_.clear();
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    const int32_t id = history[i];
    if (id < 0 || id >= n_vocab) continue;  // not a token of these logits
    if (seen_count_[size_t(id)]++ == 0) seen_ids_.push_back(id);
  }
  for (int32_t id : seen_ids_) {
    float& logit = logits_[size_t(id)];
    if (rep) logit = logit > 0 ? logit / p.repeat_penalty : logit * p.repeat_penalty;
    logit -= static_cast<float>(seen_count_[size_t(id)]) * p.frequency_penalty + p.presence_penalty;
    seen_count_[size_t(id)] = 0;
  }
  return !seen_ids_.empty();
}

void Sampler::Set::reserve(int64_t n) {
  if (logit.size() >= size_t(n)) return;
  logit.resize(size_t(n));
  weight.resize(size_t(n));
  id.resize(size_t(n));
}

// Writes every element and advances by the test: how many pass is data-dependent, and a
// mispredicted branch per element would cost more than the stores.
int64_t Sampler::keep(const float* logit, const int32_t* id, int64_t n, const Cutoff& cut,
                      Set& to) {
  to.reserve(n);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    to.logit[size_t(kept)] = logit[i];
    to.id[size_t(kept)] = id[i];
    kept += cut.keeps(logit[i], id[i]);
  }
  return kept;
}

SamplingCandidates Sampler::candidates(const float* logits, int32_t n_vocab,
                                       std::span<const int32_t> history) {
  if (n_vocab <= 0) return {};
  // Plain greedy reads the row in place: no cleaned copy, no penalties. A NaN never compares
  // greater, so max_value skips it as the copy's -inf would; the pick follows the rule below.
  if (is_plain_greedy(params_)) {
    const float m = sampling::max_value(logits, n_vocab);
    return picked_without_draw(m == sampling::kNegInf ? 0 : first_index_of(logits, n_vocab, m));
  }
  const size_t V = size_t(n_vocab);
  if (logits_.size() < V) {  // the only allocation: the first call at a vocabulary size
    logits_.resize(V);
    weights_.resize(V);
    seen_count_.resize(V, 0);
    all_ids_.resize(V);
  }
  if (all_ids_.empty() || all_ids_[V - 1] != int32_t(V - 1))
    std::iota(all_ids_.begin(), all_ids_.end(), 0);
  // The chain reads the row in place unless it needs a cleaned (NaN -> -inf) or penalised copy:
  // a copy of a 128k vocabulary is a pass the common case does without.
  bool has_nan = false;
  float m = sampling::max_value(logits, n_vocab, &has_nan);
  const float* L = logits;
  if (has_nan || penalties_apply(history)) {
    m = sampling::copy_clean_max(logits, logits_.data(), n_vocab);
    if (apply_penalties(n_vocab, history)) m = sampling::max_value(logits_.data(), n_vocab);
    L = logits_.data();
  }
  // Greedy is greedy_argmax's rule (backend.h): the largest, the lowest index among equals, 0
  // when all are -inf (NaN is already -inf here). m is that largest value, so it is m's first
  // index: one compare a logit, no branchy running maximum.
  if (params_.temperature <= 0.0f) return picked_without_draw(first_index_of(L, n_vocab, m));
  if (!std::isfinite(m))
    return picked_without_draw(first_index_of(L, n_vocab, m));  // nothing to weigh

  // The current set; every stage keeps the largest logit m, so m stays the set's max.
  const float* cl = L;
  const int32_t* ci = all_ids_.data();
  int64_t n = n_vocab;
  int next = 0;
  auto narrow = [&](const Cutoff& cut) {
    Set& to = sets_[next];
    next ^= 1;
    n = keep(cl, ci, n, cut, to);
    cl = to.logit.data();
    ci = to.id.data();
  };
  // The k best or the nucleus almost always lie a few nats below the max: the band above a
  // floor, when it holds enough (count, or mass at temperature 1), holds the whole cut
  // (everything outside is lower), so the cutoff search runs over the band instead of the set.
  // Returns whether the band held enough; the set is the band either way when `always` is set.
  const float* cw = nullptr;  // the band's weights (null for a count)
  auto narrow_to_band = [&](float floor, double enough, bool weighted, bool always) {
    Set& to = sets_[next];
    to.reserve(n);
    double mass = 0;
    const int64_t kept = sampling::collect_band(
        cl, ci, n, floor, m, 1.0f,
        {to.logit.data(), to.id.data(), weighted ? to.weight.data() : nullptr}, &mass);
    const bool enough_in_band = (weighted ? mass : double(kept)) >= enough;
    if (!enough_in_band && !always) return false;
    next ^= 1;
    n = kept;
    cl = to.logit.data();
    ci = to.id.data();
    cw = weighted ? to.weight.data() : nullptr;
    return enough_in_band;
  };
  if (params_.top_k > 0 && params_.top_k < n) {
    for (float width : {8.0f, 24.0f})
      if (narrow_to_band(m - width, double(params_.top_k), false, false)) break;
    narrow(cutoff_.find({cl, ci, nullptr, n}, params_.top_k, m));
  }
  if (params_.top_p < 1.0f && n > 1) {
    // The smallest prefix (in sorted order) whose softmax mass reaches top_p. The sum reads the
    // set once; the weights are written only for a band (or, failing one, the whole set).
    const double target = double(params_.top_p) * sampling::exp_sum(cl, n, m, 1.0f);
    if (params_.min_p > 0.0f && params_.min_p <= 1.0f) {
      // min-p, next in the chain, keeps only its band (logits >= m + ln min_p). When that band
      // holds less than the nucleus's mass, top-p's cut falls below it and keeps all of it; else
      // the cut lies inside it. Either way only the band goes on.
      if (narrow_to_band(m + std::log(params_.min_p), target, true, true))
        narrow(cutoff_.find({cl, ci, cw, n}, target, m));
    } else {
      bool banded = false;
      for (float width : {8.0f, 24.0f})
        if ((banded = narrow_to_band(m - width, target, true, false))) break;
      if (!banded) {
        sampling::exp_weights(cl, n, m, 1.0f, weights_.data());
        cw = weights_.data();
      }
      narrow(cutoff_.find({cl, ci, cw, n}, target, m));
    }
  }
  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max in logit space; above the max (min_p > 1) only the best is left.
    const float threshold = m + std::log(params_.min_p);
    Cutoff cut;
    cut.keep_all = false;
    if (threshold > m) {
      cut.logit = m;
      cut.id = ci[first_index_of(cl, n, m)];
    } else {
      // Every logit >= threshold, whatever its id: the last kept is the smallest such.
      cut.logit = threshold;
      cut.id = std::numeric_limits<int32_t>::max();
    }
    narrow(cut);
  }
  const double total = sampling::exp_weights(cl, n, m, params_.temperature, weights_.data());
  SamplingCandidates out;
  out.ids = std::span<const int32_t>(ci, size_t(n));
  out.weights = std::span<const float>(weights_.data(), size_t(n));
  out.total = total;
  return out;
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history) {
  const SamplingCandidates c = candidates(logits, n_vocab, history);
  if (c.picked >= 0 || c.ids.empty()) return c.picked;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double target = uni(rng_) * c.total;
  double cum = 0;
  size_t last_possible = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    if (c.weights[i] == 0.0f) continue;
    cum += double(c.weights[i]);
    if (target < cum) return c.ids[i];
    last_possible = i;
  }
  return c.ids[last_possible];  // rounding left the target at the very end
}

}  // namespace hearth
