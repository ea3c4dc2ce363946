// Causal multi-head attention over the f32 KV cache on the CPU, parallel over (token, head).
// Scores use an online softmax so one pass over K and V serves any context length.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace hearth::kernels {

void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, ThreadPool& pool) {
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kv_stride = n_kv_heads * head_dim;
  pool.parallel_for(n_tokens * n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(head_dim));
    for (int64_t job = begin; job < end; ++job) {
      const int64_t t = job / n_heads, h = job % n_heads;
      const int64_t kvh = h / group;
      const float* qv = q + (t * n_heads + h) * head_dim;
      const int64_t n_ctx = pos0 + t + 1;  // causal: sees itself and everything before
      float m = -INFINITY, l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = 0; p < n_ctx; ++p) {
        const float* kv = k_cache + p * kv_stride + kvh * head_dim;
        float s = 0;
        for (int64_t i = 0; i < head_dim; ++i) s += qv[i] * kv[i];
        s *= scale;
        const float* vv = v_cache + p * kv_stride + kvh * head_dim;
        if (s > m) {
          const float corr = std::exp(m - s);
          l *= corr;
          for (int64_t i = 0; i < head_dim; ++i) acc[size_t(i)] *= corr;
          m = s;
        }
        const float e = std::exp(s - m);
        l += e;
        for (int64_t i = 0; i < head_dim; ++i) acc[size_t(i)] += e * vv[i];
      }
      float* o = out + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) o[i] = acc[size_t(i)] / l;
    }
  });
}

}  // namespace hearth::kernels
