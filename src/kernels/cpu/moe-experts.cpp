// ops.h moe_experts: a routed MoE layer's experts on the CPU in three passes over the pool, each
// for all selected experts at once. The (token, expert) slots are grouped by expert; every
// expert's gate and up run over its tokens in one grouped matmul (one hand-out of all their rows,
// each expert's input quantized once, a decode token's once for all eight), the activation over
// all rows in one call, every down in a second grouped matmul, then the weighted sum per token.
// Expert by expert instead, a decode step paid three fork-joins per expert over matrices of a few
// hundred rows, and re-quantized its one input for each (docs/performance.md, "Mixture of
// experts").
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/cpu/small-ops.h"
#include "kernels/ops.h"

namespace hearth::kernels {

namespace {

// Reused across calls on the caller's thread (a decode step must not allocate).
struct MoeScratch {
  std::vector<int64_t> count, first;  // per expert: its slots, and its first row
  std::vector<int64_t> row_token;     // per row (slots in expert order): the token
  std::vector<float> row_weight;      // per row: the router's weight
  std::vector<int64_t> token_rows;    // per token: its k rows, ascending expert id
  std::vector<int64_t> cursor;        // fill positions while sorting
  std::vector<float> x, gate, up, down;
  std::vector<MatmulIn> mats;
  std::vector<PackedMatmulIn> packed;
};

MoeScratch& moe_scratch() {
  thread_local MoeScratch s;
  return s;
}

// Below this many multiply-adds the weighted sum stays on the caller (one decode token's).
constexpr int64_t kParallelSumElements = 1 << 16;

// One projection's output buffer: expert e writes rows [first[e], first[e] + count[e]) of it.
struct ProjectionOut {
  ExpertProj proj;
  float* y;
};

// One grouped matmul over the used experts' matrices of `outs` (d rows, n columns each): expert
// e reads rows [first[e], ...) of in [rows, n], or with one_input (a decode token) row 0 for
// every expert. Packed when every matrix is, else in the file's layout through `table` (nullptr:
// the active table, with the prefill GEMM where it applies).
void run_projections(const MoeExperts& m, std::initializer_list<ProjectionOut> outs,
                     const float* in, bool one_input, int64_t n, int64_t d,
                     const KernelTable* table, MoeScratch& s, ThreadPool& pool,
                     const MatrixEngineOptions& engine) {
  s.mats.clear(), s.packed.clear();
  bool all_packed = table == nullptr;
  for (int64_t e = 0; e < m.n_expert; ++e) {
    const int64_t cnt = s.count[size_t(e)], first = s.first[size_t(e)];
    if (cnt == 0) continue;
    const float* xe = one_input ? in : in + first * n;
    for (const ProjectionOut& o : outs) {
      const ExpertMatrix w = m.matrix(m.ctx, o.proj, e);
      float* ye = o.y + first * d;
      s.mats.push_back({w.w, xe, cnt, ye});
      all_packed = all_packed && w.packed;
      if (all_packed) s.packed.push_back({{w.w->dtype, w.packed, d, ye}, xe, cnt});
    }
  }
  if (all_packed)
    matmul_packed_grouped(s.packed, n, pool, engine);
  else if (table)
    matmul_grouped_with_table(*table, s.mats, pool);
  else
    matmul_grouped(s.mats, pool, engine);
}

void add_expert_biases(const MoeExperts& m, ExpertProj proj, float* rows, int64_t n,
                       const MoeScratch& s) {
  if (!m.bias) return;
  for (int64_t e = 0; e < m.n_expert; ++e)
    if (s.count[size_t(e)] > 0)
      if (const float* b = m.bias(m.ctx, proj, e))
        add_bias(rows + s.first[size_t(e)] * n, b, s.count[size_t(e)], n);
}

void run_experts(const MoeExperts& m, const float* x, int64_t T, const int32_t* ids,
                 const float* weights, float* out, bool accumulate, const KernelTable* table,
                 ThreadPool& pool, const MatrixEngineOptions& engine) {
  const int64_t E = m.n_embd, F = m.n_ff, K = m.n_used, NE = m.n_expert, S = T * K;
  if (T <= 0) return;
  MoeScratch& s = moe_scratch();
  // The slots grouped by expert (a counting sort: tokens stay ascending within an expert).
  s.count.assign(size_t(NE), 0);
  for (int64_t i = 0; i < S; ++i) ++s.count[size_t(ids[i])];
  s.first.resize(size_t(NE));
  for (int64_t e = 0, r = 0; e < NE; ++e) s.first[size_t(e)] = r, r += s.count[size_t(e)];
  s.row_token.resize(size_t(S)), s.row_weight.resize(size_t(S));
  s.cursor.assign(s.first.begin(), s.first.end());
  for (int64_t i = 0; i < S; ++i) {
    const int64_t r = s.cursor[size_t(ids[i])]++;
    s.row_token[size_t(r)] = i / K, s.row_weight[size_t(r)] = weights[i];
  }
  s.token_rows.resize(size_t(S));
  s.cursor.assign(size_t(T), 0);
  for (int64_t r = 0; r < S; ++r) {  // rows ascend by expert, so each token's list does too
    const int64_t t = s.row_token[size_t(r)];
    s.token_rows[size_t(t * K + s.cursor[size_t(t)]++)] = r;
  }
  // One token: every expert reads x itself; more: each expert's tokens gathered in its rows.
  const float* in = x;
  if (T > 1) {
    s.x.resize(size_t(S * E));
    float* xg = s.x.data();
    const std::vector<int64_t>& rt = s.row_token;
    pool.parallel_for(S, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        std::memcpy(xg + r * E, x + rt[size_t(r)] * E, size_t(E) * sizeof(float));
    });
    in = xg;
  }
  s.gate.resize(size_t(S * F)), s.up.resize(size_t(S * F)), s.down.resize(size_t(S * E));
  // Gate and up in one grouped call: with one token all 2k matrices read one quantized row.
  run_projections(m, {{ExpertProj::kGate, s.gate.data()}, {ExpertProj::kUp, s.up.data()}}, in,
                  T == 1, E, F, table, s, pool, engine);
  add_expert_biases(m, ExpertProj::kGate, s.gate.data(), F, s);
  add_expert_biases(m, ExpertProj::kUp, s.up.data(), F, s);
  switch (m.act) {
    case GatedAct::kSilu:
      swiglu(s.gate.data(), s.up.data(), s.gate.data(), S * F, pool);
      break;
    case GatedAct::kGeluTanh:
      gelu_tanh_gated(s.gate.data(), s.up.data(), s.gate.data(), S * F, pool);
      break;
    case GatedAct::kSwigluClamped:
      swiglu_clamped(s.gate.data(), s.up.data(), s.gate.data(), S * F, m.swiglu_alpha,
                     m.swiglu_limit, pool);
      break;
  }
  run_projections(m, {{ExpertProj::kDown, s.down.data()}}, s.gate.data(), false, F, E, table, s,
                  pool, engine);
  add_expert_biases(m, ExpertProj::kDown, s.down.data(), E, s);
  // out[t] (+)= sum of w * down row over t's experts in ascending id order: the order (and so
  // the rounding) of Backend::moe_ffn's default, which adds each expert's rows in turn.
  const float* down = s.down.data();
  const std::vector<int64_t>& token_rows = s.token_rows;
  const std::vector<float>& row_weight = s.row_weight;
  auto sum = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> acc;
    acc.resize(size_t(E));
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        const int64_t r = token_rows[size_t(t * K + j)];
        const float w = row_weight[size_t(r)];
        const float* d = down + r * E;
        for (int64_t c = 0; c < E; ++c) acc[size_t(c)] += w * d[c];
      }
      float* o = out + t * E;
      if (accumulate)
        for (int64_t c = 0; c < E; ++c) o[c] += acc[size_t(c)];
      else
        std::copy(acc.begin(), acc.end(), o);
    }
  };
  if (S * E < kParallelSumElements)
    sum(0, T);
  else
    pool.parallel_for(T, 1, sum);
}

}  // namespace

void moe_experts(const MoeExperts& m, const float* x, int64_t T, const int32_t* ids,
                 const float* weights, float* out, bool accumulate, ThreadPool& pool,
                 const MatrixEngineOptions& engine) {
  run_experts(m, x, T, ids, weights, out, accumulate, nullptr, pool, engine);
}

void moe_experts_with_table(const KernelTable& table, const MoeExperts& m, const float* x,
                            int64_t T, const int32_t* ids, const float* weights, float* out,
                            bool accumulate, ThreadPool& pool) {
  run_experts(m, x, T, ids, weights, out, accumulate, &table, pool, {});
}

}  // namespace hearth::kernels
