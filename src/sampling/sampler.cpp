// The sampling chain of sampler.h: penalties -> top-k -> top-p -> min-p -> temperature -> draw.
// Add a stage as one small function over `candidates_` and call it in sample() in chain order.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace hearth {
namespace {

using Candidates = std::vector<std::pair<float, int32_t>>;  // (logit, id)

// llama.cpp semantics: repetition divides positive logits and multiplies negative ones; presence
// subtracts once per seen token, frequency once per occurrence.
void apply_penalties(Candidates& c, const SamplingParams& p, std::span<const int32_t> history) {
  const bool rep = p.repeat_penalty != 1.0f;
  if (!rep && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  if (p.repeat_last_n == 0 || history.empty()) return;
  size_t n = history.size();
  if (p.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p.repeat_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
  for (auto& [logit, id] : c) {
    auto it = counts.find(id);
    if (it == counts.end()) continue;
    if (rep) logit = logit > 0 ? logit / p.repeat_penalty : logit * p.repeat_penalty;
    logit -= static_cast<float>(it->second) * p.frequency_penalty + p.presence_penalty;
  }
}

// Sorted by logit descending, ties by lower id, so every later stage is deterministic.
void sort_desc(Candidates& c) {
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
}

void top_k(Candidates& c, int32_t k) {
  if (k > 0 && static_cast<size_t>(k) < c.size()) c.resize(k);
}

std::vector<double> softmax(const Candidates& c) {  // c sorted descending
  std::vector<double> p(c.size());
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) sum += p[i] = std::exp(double(c[i].first - c[0].first));
  for (double& x : p) x /= sum;
  return p;
}

// Keeps the smallest prefix whose probability mass reaches top_p (at least one token).
void top_p(Candidates& c, float tp) {
  if (tp >= 1.0f || c.size() <= 1) return;
  const auto p = softmax(c);
  double cum = 0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += p[i];
    if (cum >= tp) {
      keep = i + 1;
      break;
    }
  }
  c.resize(std::max<size_t>(keep, 1));
}

// Drops tokens whose probability is below min_p times the most likely token's.
void min_p(Candidates& c, float mp) {
  if (mp <= 0.0f || c.empty()) return;
  const float threshold = c[0].first + std::log(mp);  // p_i >= mp * p_max in logit space
  size_t keep = 1;
  while (keep < c.size() && c[keep].first >= threshold) ++keep;
  c.resize(keep);
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

int32_t Sampler::sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history) {
  if (n_vocab <= 0) return -1;
  candidates_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) candidates_[i] = {logits[i], i};
  // NaN logits would poison comparisons and softmax; treat them as impossible.
  for (auto& c : candidates_) {
    if (std::isnan(c.first)) c.first = -INFINITY;
  }
  apply_penalties(candidates_, params_, history);
  if (params_.temperature <= 0.0f) {
    // Greedy: argmax after penalties, lowest id on ties.
    size_t best = 0;
    for (size_t i = 1; i < candidates_.size(); ++i) {
      if (candidates_[i].first > candidates_[best].first) best = i;
    }
    return candidates_[best].second;
  }
  sort_desc(candidates_);
  if (!std::isfinite(candidates_[0].first)) return candidates_[0].second;  // nothing to weigh
  top_k(candidates_, params_.top_k);
  top_p(candidates_, params_.top_p);
  min_p(candidates_, params_.min_p);
  for (auto& c : candidates_) c.first /= params_.temperature;
  const auto probs = softmax(candidates_);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double r = uni(rng_);
  double cum = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (r < cum) return candidates_[i].second;
  }
  return candidates_.back().second;
}

}  // namespace hearth
