// The mixture-of-experts FFN block: router matmul (+ bias) on the backend, routing on the host,
// then per expert one gated FFN (biases where the family has them: gpt-oss) over the rows routed
// to it (gathered), scattered back weighted. Simple
// and exact rather than fast; a backend-side version would route on the device.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "model/model.h"

namespace hearth {

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

void Model::moe_block(int64_t l, ForwardScratch::Buffers& b, Backend* be, int64_t T) const {
  const LayerWeights& w = layers_[size_t(l)];
  const int64_t E = hp_.n_embd, NE = hp_.n_expert, K = hp_.n_expert_used, F = hp_.n_ff_exp;
  be->matmul(w.router, b.xn, T, b.router);
  if (w.router_bias) be->add_bias(b.router, w.router_bias, T, NE);
  std::vector<float> logits(size_t(T * NE)), xn(size_t(T * E)), acc(size_t(T * E), 0.0f);
  be->download(logits.data(), b.router, T * NE);
  be->download(xn.data(), b.xn, T * E);
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> weights(static_cast<size_t>(T * K));
  route_top_k(logits.data(), T, NE, K, hp_.moe_norm_topk, ids.data(), weights.data());

  // Group the (token, weight) pairs by expert: one matmul per expert over its rows.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(NE));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      routed[size_t(ids[size_t(t * K + j)])].push_back({t, weights[size_t(t * K + j)]});
  std::vector<float> rows, out;
  for (int64_t e = 0; e < NE; ++e) {
    const auto& r = routed[size_t(e)];
    if (r.empty()) continue;
    const int64_t n = int64_t(r.size());
    rows.resize(size_t(n * E));
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(xn.data() + r[size_t(i)].first * E, E, rows.data() + i * E);
    be->upload(b.moe_in, rows.data(), n * E);
    const Backend::MatmulOut gate_up[] = {{&w.exp_gate[size_t(e)], b.gate},
                                          {&w.exp_up[size_t(e)], b.up}};
    be->matmul_shared(b.moe_in, n, gate_up);
    const bool biased = !w.exp_gate_bias.empty();  // gpt-oss: each projection has a bias
    if (biased) {
      be->add_bias(b.gate, w.exp_gate_bias[size_t(e)], n, F);
      be->add_bias(b.up, w.exp_up_bias[size_t(e)], n, F);
    }
    gated_activation(be, b.gate, b.up, n * F);
    be->matmul(w.exp_down[size_t(e)], b.gate, n, b.moe_out);
    if (biased) be->add_bias(b.moe_out, w.exp_down_bias[size_t(e)], n, E);
    out.resize(size_t(n * E));
    be->download(out.data(), b.moe_out, n * E);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = acc.data() + r[size_t(i)].first * E;
      const float* src = out.data() + i * E;
      const float wt = r[size_t(i)].second;
      for (int64_t c = 0; c < E; ++c) dst[c] += wt * src[c];
    }
  }
  be->upload(b.moe_out, acc.data(), T * E);
  if (w.post_ffn_norm) be->rmsnorm(b.moe_out, w.post_ffn_norm, b.moe_out, T, E, hp_.rms_eps);
  be->add_inplace(b.x, b.moe_out, T * E);
}

}  // namespace hearth
