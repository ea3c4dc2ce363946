// ops.h route_top_k: the router's rule, shared by every backend (the CUDA router kernel is
// tested against this). Host code: a router over n_expert values per token costs nothing next
// to the experts' matmuls.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace hearth::kernels {

void route_top_k(const float* logits, int64_t T, int64_t n_expert, int64_t k, bool renormalise,
                 int32_t* experts, float* weights) {
  std::vector<float> p(static_cast<size_t>(n_expert));
  std::vector<bool> taken(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits + t * n_expert;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < n_expert; ++e)
      if (z[e] > max) max = z[e];
    double sum = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
      p[size_t(e)] = std::isnan(z[e]) ? 0.0f : std::exp(z[e] - max);
      sum += p[size_t(e)];
    }
    for (int64_t e = 0; e < n_expert; ++e) p[size_t(e)] = float(p[size_t(e)] / sum);
    taken.assign(size_t(n_expert), false);
    double picked = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < n_expert; ++e) {
        if (taken[size_t(e)]) continue;
        // Strictly greater: among equal probabilities the lower index stays.
        if (best < 0 || p[size_t(e)] > p[size_t(best)]) best = e;
      }
      taken[size_t(best)] = true;
      experts[t * k + j] = int32_t(best);
      weights[t * k + j] = p[size_t(best)];
      picked += p[size_t(best)];
    }
    if (renormalise && picked > 0)
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] = float(weights[t * k + j] / picked);
  }
}

}  // namespace hearth::kernels
