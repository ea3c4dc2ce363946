// Token sampling as a chain of small stages: penalties -> top-k -> top-p -> min-p ->
// temperature -> draw (or greedy when temperature <= 0). Same seed => same output.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

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

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Picks the next token from logits [n_vocab] given the tokens so far (prompt + generated).
  int32_t sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }
  void set_params(const SamplingParams& p);  // keeps the RNG state
  uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace hearth
