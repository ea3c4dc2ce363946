// Log-softmax in double (32k-256k terms) and a partial sort for the top tokens.
#include "runtime/token-logprobs.h"

#include <algorithm>
#include <cmath>

namespace hearth {

TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t chosen, int top_n,
                           const Tokenizer& tokenizer) {
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - double(max));
  const double log_z = double(max) + std::log(sum);
  auto alternative = [&](int32_t id) {
    return TokenAlternative{id, tokenizer.token_bytes(id), float(double(logits[id]) - log_z)};
  };
  TokenLogprob out;
  out.chosen = alternative(chosen);
  const int n = std::clamp(top_n, 0, n_vocab);
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) ids[size_t(i)] = i;
    auto more_likely = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), more_likely);
    for (int k = 0; k < n; ++k) out.top.push_back(alternative(ids[size_t(k)]));
  }
  return out;
}

}  // namespace hearth
