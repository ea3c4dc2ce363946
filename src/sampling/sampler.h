// Token sampling as a chain of small stages: penalties -> top-k -> top-p -> min-p ->
// temperature -> draw (or greedy when temperature <= 0). Same seed => same output.
// Every stage is O(V) with no sort of the vocabulary and no allocation once the buffers have
// grown to the vocabulary (sampling/cutoff.h finds where top-k and top-p cut).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sampling/cutoff.h"

namespace hearth {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax, lowest id wins ties)
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty =
      1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int32_t repeat_last_n = 64;  // how many recent tokens the penalties look at (-1: all)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xFFFFFFFF;  // 0xFFFFFFFF: random seed
};

// True when sampling is a plain argmax of the logits (temperature <= 0, no penalty stage): the
// token is then greedy_argmax's (backend.h), which a backend may compute on the device.
bool is_plain_greedy(const SamplingParams& p);

// What the chain leaves for the draw: either one token picked without a draw (temperature <= 0,
// or no finite logit), or the tokens the draw may pick (ascending id) with their weights, the
// unnormalised probabilities at the temperature (probability = weight / total).
struct SamplingCandidates {
  int32_t picked = -1;  // >= 0: the token, no draw
  std::span<const int32_t> ids;
  std::span<const float> weights;
  double total = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Picks the next token from logits [n_vocab] given the tokens so far (prompt + generated).
  int32_t sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history);
  // The chain without the draw (what sample() draws from); valid until the next call.
  SamplingCandidates candidates(const float* logits, int32_t n_vocab,
                                std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }
  void set_params(const SamplingParams& p);  // keeps the RNG state
  uint64_t seed() const { return seed_; }

 private:
  struct Set {  // candidates as parallel arrays, ascending id
    std::vector<float> logit, weight;
    std::vector<int32_t> id;
    void reserve(int64_t n);  // grows only
  };
  // Whether the penalty stage has anything to do (a penalty on and a window of history).
  bool penalties_apply(std::span<const int32_t> history) const;
  // True when it changed a logit (the max must be taken again).
  bool apply_penalties(int32_t n_vocab, std::span<const int32_t> history);
  // Writes the n candidates (logit, id) that `cut` keeps to `to`, in order; returns how many.
  static int64_t keep(const float* logit, const int32_t* id, int64_t n, const sampling::Cutoff& cut,
                      Set& to);

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  // Scratch, sized to the vocabulary once.
  std::vector<float> logits_;        // the clean, penalised logits (when the row needs a copy)
  std::vector<float> weights_;       // exp weights of the current set
  std::vector<int32_t> all_ids_;     // 0..V-1, the set before top-k
  std::vector<int32_t> seen_count_;  // per token, within the penalty window (zero between calls)
  std::vector<int32_t> seen_ids_;    // the distinct tokens of the window
  Set sets_[2];
  sampling::CutoffFinder cutoff_;
};

}  // namespace hearth
