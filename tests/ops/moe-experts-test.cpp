// The CPU MoE experts op (kernels/ops.h moe_experts): all selected experts' gate/up as one
// grouped matmul, then all downs, against the plain per-expert reference (one matmul per token
// and expert, weighted sum in ascending expert order) with the same matrices: every ISA table
// the machine has in the file's layout, and the active table's packed layouts. Also the grouped
// matmuls themselves against one call each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace hearth {
namespace {

using kernels::ExpertProj;
using kernels::GatedAct;

struct Matrix {
  TensorView w;
  std::vector<uint8_t> bytes, packed_storage;
  uint8_t* packed = nullptr;
};

Matrix random_matrix(DType t, int64_t d, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 0.1f);
  std::vector<float> wf(size_t(d * n));
  for (float& v : wf) v = nd(rng);
  Matrix m;
  m.bytes.resize(*row_bytes(t, uint64_t(n)) * uint64_t(d));
  EXPECT_TRUE(kernels::quantize_rows(t, wf.data(), m.bytes.data(), d, n).is_ok());
  m.w = TensorView{"w", t, {d, n}, m.bytes.data(), m.bytes.size()};
  if (const auto size = kernels::packed_size(t, d, n)) {
    m.packed_storage.resize(*size + 64);
    m.packed = reinterpret_cast<uint8_t*>((uintptr_t(m.packed_storage.data()) + 63) / 64 * 64);
    ThreadPool one(1);
    kernels::pack_weight(m.w, m.packed, one);
  }
  return m;
}

struct Layer {
  int64_t E, F, NE, K;
  std::vector<Matrix> gate, up, down;
  std::vector<std::vector<float>> bias[3];  // gate, up, down; empty: none
  bool use_packed = false;
  const std::vector<Matrix>& list(ExpertProj p) const {
    return p == ExpertProj::kGate ? gate : p == ExpertProj::kUp ? up : down;
  }
};

kernels::MoeExperts experts_of(const Layer& l, GatedAct act) {
  kernels::MoeExperts m;
  m.n_embd = l.E, m.n_ff = l.F, m.n_expert = l.NE, m.n_used = l.K;
  m.ctx = &l;
  m.matrix = [](const void* ctx, ExpertProj p, int64_t e) {
    const Layer& l = *static_cast<const Layer*>(ctx);
    const Matrix& w = l.list(p)[size_t(e)];
    return kernels::ExpertMatrix{&w.w, l.use_packed ? w.packed : nullptr};
  };
  if (!l.bias[0].empty())
    m.bias = [](const void* ctx, ExpertProj p, int64_t e) -> const float* {
      return static_cast<const Layer*>(ctx)->bias[int(p)][size_t(e)].data();
    };
  m.act = act, m.swiglu_alpha = 1.702f, m.swiglu_limit = 7.0f;
  return m;
}

// One matrix over T tokens: the packed kernel where the layer uses it, else the table's.
void run_matrix(const kernels::KernelTable& table, const Layer& l, const Matrix& m, const float* x,
                int64_t T, float* y, ThreadPool& pool) {
  if (l.use_packed && m.packed)
    kernels::matmul_packed(m.w.dtype, m.packed, m.w.rows(), m.w.cols(), x, T, y, pool);
  else
    kernels::matmul_with_table(table, m.w, x, T, y, pool);
}

// The plain reference (Backend::moe_ffn's default): expert by expert in ascending id order,
// each over its tokens gathered, the weighted rows added to a zeroed sum per token.
std::vector<float> per_expert_reference(const kernels::KernelTable& table, const Layer& l,
                                        GatedAct act, const std::vector<float>& x, int64_t T,
                                        const std::vector<int32_t>& ids,
                                        const std::vector<float>& w, std::vector<float> out,
                                        bool accumulate, ThreadPool& pool) {
  const int64_t E = l.E, F = l.F, K = l.K;
  std::vector<float> acc(x.size(), 0.f);
  for (int32_t e = 0; e < int32_t(l.NE); ++e) {
    std::vector<int64_t> tokens;
    std::vector<float> wts, in;
    for (int64_t s = 0; s < T * K; ++s)
      if (ids[size_t(s)] == e) {
        tokens.push_back(s / K), wts.push_back(w[size_t(s)]);
        in.insert(in.end(), x.begin() + (s / K) * E, x.begin() + (s / K + 1) * E);
      }
    const int64_t n = int64_t(tokens.size());
    if (n == 0) continue;
    std::vector<float> g(in.size() / size_t(E) * size_t(F)), u(g.size()), d(in.size());
    run_matrix(table, l, l.gate[size_t(e)], in.data(), n, g.data(), pool);
    run_matrix(table, l, l.up[size_t(e)], in.data(), n, u.data(), pool);
    if (!l.bias[0].empty()) {
      kernels::add_bias(g.data(), l.bias[0][size_t(e)].data(), n, F);
      kernels::add_bias(u.data(), l.bias[1][size_t(e)].data(), n, F);
    }
    const int64_t nf = n * F;
    if (act == GatedAct::kSilu) kernels::swiglu(g.data(), u.data(), g.data(), nf);
    if (act == GatedAct::kGeluTanh) kernels::gelu_tanh_gated(g.data(), u.data(), g.data(), nf);
    if (act == GatedAct::kSwigluClamped)
      kernels::swiglu_clamped(g.data(), u.data(), g.data(), nf, 1.702f, 7.0f);
    run_matrix(table, l, l.down[size_t(e)], g.data(), n, d.data(), pool);
    if (!l.bias[0].empty()) kernels::add_bias(d.data(), l.bias[2][size_t(e)].data(), n, E);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < E; ++c)
        acc[size_t(tokens[size_t(i)] * E + c)] += wts[size_t(i)] * d[size_t(i * E + c)];
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = accumulate ? out[i] + acc[i] : acc[i];
  return out;
}

Layer make_layer(DType gate_up, DType down, bool biases, std::mt19937& rng) {
  Layer l{256, 256, 6, 3, {}, {}, {}, {}, false};
  std::normal_distribution<float> nd(0.f, 0.5f);
  for (int64_t e = 0; e < l.NE; ++e) {
    l.gate.push_back(random_matrix(gate_up, l.F, l.E, rng));
    l.up.push_back(random_matrix(gate_up, l.F, l.E, rng));
    l.down.push_back(random_matrix(down, l.E, l.F, rng));
    if (biases)
      for (int p = 0; p < 3; ++p) {
        std::vector<float> b(size_t(p == 2 ? l.E : l.F));
        for (float& v : b) v = nd(rng);
        l.bias[p].push_back(std::move(b));
      }
  }
  return l;
}

// Random routing: k distinct experts per token; expert 4 never chosen (an expert with no
// tokens), the others with uneven counts.
void route(const Layer& l, int64_t T, std::mt19937& rng, std::vector<int32_t>& ids,
           std::vector<float>& w) {
  ids.assign(size_t(T * l.K), 0), w.assign(size_t(T * l.K), 0.f);
  std::uniform_real_distribution<float> ud(0.1f, 1.f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pool = {0, 1, 2, 3, 5};
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < l.K; ++j) {
      ids[size_t(t * l.K + j)] = pool[size_t(j)];
      w[size_t(t * l.K + j)] = ud(rng);
    }
  }
}

struct Case {
  DType gate_up, down;
  GatedAct act;
  bool biases;
};
// Q4_K_M's and Q5_K_M's mixes (Q4_K / Q5_K gate/up, Q6_K down), the legacy types, f16, and
// gpt-oss's and Gemma's activations with biases.
const Case kCases[] = {{DType::Q4_K, DType::Q4_K, GatedAct::kSilu, false},
                       {DType::Q4_K, DType::Q6_K, GatedAct::kSilu, false},
                       {DType::Q5_K, DType::Q6_K, GatedAct::kSilu, false},
                       {DType::Q4_0, DType::Q8_0, GatedAct::kSilu, false},
                       {DType::F16, DType::F16, GatedAct::kGeluTanh, true},
                       {DType::Q8_0, DType::Q4_0, GatedAct::kSwigluClamped, true}};

void expect_matches(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6f * (std::fabs(want[i]) + 1.f)) << what << " at " << i;
}

// Decode (one token), a few tokens and a prompt; 2 and 3 threads; into a fresh output and added to
// a residual; the file layout through every table, then the active table's packed layouts.
TEST(MoeExperts, GroupedMatchesPerExpertReferenceOnEveryIsa) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  int packed_runs = 0;
  for (const Case& c : kCases) {
    Layer l = make_layer(c.gate_up, c.down, c.biases, rng);
    const kernels::MoeExperts m = experts_of(l, c.act);
    for (int threads : {2, 3}) {  // 3: uneven shares of the grouped rows
      ThreadPool pool(threads);
      for (int64_t T : {1, 2, 7, 33}) {
        std::vector<float> x(size_t(T * l.E)), residual(size_t(T * l.E));
        for (float& v : x) v = nd(rng);
        for (float& v : residual) v = nd(rng);
        std::vector<int32_t> ids;
        std::vector<float> w;
        route(l, T, rng, ids, w);
        const std::string what = std::string(dtype_name(c.gate_up)) + "/" + dtype_name(c.down) +
                                 " T=" + std::to_string(T) + " threads=" + std::to_string(threads);
        for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
          for (bool accumulate : {false, true}) {
            l.use_packed = false;
            std::vector<float> got = residual;
            kernels::moe_experts_with_table(*table, m, x.data(), T, ids.data(), w.data(),
                                            got.data(), accumulate, pool);
            expect_matches(
                got,
                per_expert_reference(*table, l, c.act, x, T, ids, w, residual, accumulate, pool),
                what + " " + table->name);
          }
        }
        // The packed path (the CPU backend's): as the per-expert packed matmuls.
        l.use_packed = true;
        std::vector<float> got = residual;
        kernels::moe_experts(m, x.data(), T, ids.data(), w.data(), got.data(), true, pool);
        expect_matches(got,
                       per_expert_reference(kernels::active_kernel_table(), l, c.act, x, T, ids, w,
                                            residual, true, pool),
                       what + " packed");
        packed_runs += l.gate[0].packed != nullptr;
      }
    }
  }
  if (kernels::active_kernel_table().isa == kernels::Isa::kAvx512) {
    EXPECT_GT(packed_runs, 0);
  }
}

// The grouped matmuls alone: matrices of different shapes and inputs (some shared, some with no
// tokens) give exactly one call each, on every table and (packed) on the active one.
TEST(MoeExperts, GroupedMatmulsMatchOneCallEach) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<Matrix> mats;
  for (auto [t, d] : {std::pair<DType, int64_t>{DType::Q4_K, 48},
                      {DType::Q4_K, 16},
                      {DType::Q4_0, 96},
                      {DType::Q8_0, 32}})
    mats.push_back(random_matrix(t, d, 512, rng));
  const int64_t tokens[] = {3, 3, 0, 1};  // matrices 0 and 1 share their input
  std::vector<std::vector<float>> xs;
  for (int64_t i = 0; i < 4; ++i) {
    xs.emplace_back(size_t(std::max<int64_t>(tokens[i], 1) * 512));
    for (float& v : xs.back()) v = nd(rng);
  }
  const float* x_of[] = {xs[0].data(), xs[0].data(), xs[2].data(), xs[3].data()};
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
      std::vector<std::vector<float>> got, want;
      std::vector<kernels::MatmulIn> list;
      for (size_t i = 0; i < mats.size(); ++i) {
        const int64_t n = std::max<int64_t>(tokens[i], 1) * mats[i].w.rows();
        got.emplace_back(size_t(n), -777.f), want.emplace_back(size_t(n), -777.f);
      }
      for (size_t i = 0; i < mats.size(); ++i)
        list.push_back({&mats[i].w, x_of[i], tokens[i], got[i].data()});
      kernels::matmul_grouped_with_table(*table, list, pool);
      for (size_t i = 0; i < mats.size(); ++i) {
        kernels::matmul_with_table(*table, mats[i].w, x_of[i], tokens[i], want[i].data(), pool);
        ASSERT_EQ(got[i], want[i]) << table->name << " matrix " << i;
      }
    }
    std::vector<kernels::PackedMatmulIn> packed;
    std::vector<std::vector<float>> got, want;
    for (size_t i = 0; i < mats.size(); ++i) {
      if (!mats[i].packed) continue;
      const int64_t n = std::max<int64_t>(tokens[i], 1) * mats[i].w.rows();
      got.emplace_back(size_t(n), -777.f), want.emplace_back(size_t(n), -777.f);
    }
    for (size_t i = 0, k = 0; i < mats.size(); ++i)
      if (mats[i].packed)
        packed.push_back({{mats[i].w.dtype, mats[i].packed, mats[i].w.rows(), got[k++].data()},
                          x_of[i],
                          tokens[i]});
    kernels::matmul_packed_grouped(packed, 512, pool);
    for (size_t k = 0; k < packed.size(); ++k) {
      const kernels::PackedMatmul& p = packed[k].m;
      kernels::matmul_packed(p.dtype, p.packed, p.d, 512, packed[k].x, packed[k].n_tokens,
                             want[k].data(), pool);
      ASSERT_EQ(got[k], want[k]) << "packed " << k;
    }
  }
}

}  // namespace
}  // namespace hearth
