// Backend::moe_ffn's default (backend.h): routing on the host, then one matmul per expert over
// the rows routed to it (gathered), through the backend's own ops. Backends that route on the
// device (CUDA) override it.
#include <algorithm>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "kernels/ops.h"

namespace hearth {

void Backend::moe_ffn(const MoeBlock& m) {
  const int64_t T = m.n_tokens, E = m.n_embd, F = m.n_ff, NE = m.n_expert, K = m.n_used;
  matmul(*m.router, m.x, T, m.logits);
  if (m.router_bias) add_bias(m.logits, m.router_bias, T, NE);
  std::vector<float> logits(size_t(T * NE)), x(size_t(T * E)), acc(size_t(T * E), 0.0f);
  download(logits.data(), m.logits, T * NE);
  download(x.data(), m.x, T * E);
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> weights(static_cast<size_t>(T * K));
  kernels::route_top_k(logits.data(), T, NE, K, m.renormalise, ids.data(), weights.data());
  // The (token, weight) pairs grouped by expert: one matmul per expert over its rows.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(NE));
  for (int64_t s = 0; s < T * K; ++s)
    routed[size_t(ids[size_t(s)])].push_back({s / K, weights[size_t(s)]});
  std::vector<float> rows, out;
  for (int64_t e = 0; e < NE; ++e) {
    const auto& r = routed[size_t(e)];
    if (r.empty()) continue;
    const int64_t n = int64_t(r.size());
    rows.resize(size_t(n * E));
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(x.data() + r[size_t(i)].first * E, E, rows.data() + i * E);
    upload(m.in_rows, rows.data(), n * E);
    const MatmulOut gate_up[] = {{&m.gate[size_t(e)], m.gate_rows}, {&m.up[size_t(e)], m.up_rows}};
    matmul_shared(m.in_rows, n, gate_up);
    if (!m.gate_bias.empty()) {
      add_bias(m.gate_rows, m.gate_bias[size_t(e)], n, F);
      add_bias(m.up_rows, m.up_bias[size_t(e)], n, F);
    }
    if (m.act == GatedAct::kSwigluClamped)
      swiglu_clamped(m.gate_rows, m.up_rows, m.gate_rows, n * F, m.swiglu_alpha, m.swiglu_limit);
    else if (m.act == GatedAct::kGeluTanh)
      gelu_tanh_gated(m.gate_rows, m.up_rows, m.gate_rows, n * F);
    else
      swiglu(m.gate_rows, m.up_rows, m.gate_rows, n * F);
    matmul(m.down[size_t(e)], m.gate_rows, n, m.out_rows);
    if (!m.down_bias.empty()) add_bias(m.out_rows, m.down_bias[size_t(e)], n, E);
    out.resize(size_t(n * E));
    download(out.data(), m.out_rows, n * E);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = acc.data() + r[size_t(i)].first * E;
      const float wt = r[size_t(i)].second;
      for (int64_t c = 0; c < E; ++c) dst[c] += wt * out[size_t(i * E + c)];
    }
  }
  upload(m.out_rows, acc.data(), T * E);
  if (m.accumulate)
    add_inplace(m.out, m.out_rows, T * E);
  else if (m.out != m.out_rows)
    copy(m.out, m.out_rows, T * E);
}

}  // namespace hearth
