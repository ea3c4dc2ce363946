// The CUDA backend's mixture-of-experts op against host references: the device router against
// ops.h route_top_k (ties, renormalisation, NaN), moe_ffn (gather-GEMV decode and grouped
// prefill) against dense per-expert matmuls in float64 over the dequantized experts, per expert
// dtype, with gpt-oss's biases and clamped SwiGLU; MXFP4's device decode bit for bit against the
// scalar reference, and its GEMV.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "backend/cuda/cuda-weights.h"
#include "cuda-test-util.h"
#include "kernels/cuda/moe-ops.h"
#include "kernels/quantize.h"
#include "kernels/ref/quant-ref.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

// Device int32 buffer (a float-sized allocation of the backend).
int32_t* dev_ints(Backend& b, int64_t n, std::vector<float*>& owned) {
  float* p = b.alloc(n);
  owned.push_back(p);
  return reinterpret_cast<int32_t*>(p);
}

TEST_F(CudaTest, MoeRouteMatchesHostRuleWithTiesRenormAndNan) {
  for (int64_t NE : {4, 8, 60, 128, 512})
    for (int64_t K : {1, 2, 8})
      for (bool renorm : {false, true}) {
        if (K > NE) continue;
        const int64_t T = 7;
        // Small integers: many exact ties, which must go to the lower index as on the host.
        std::vector<float> logits(static_cast<size_t>(T * NE));
        for (size_t i = 0; i < logits.size(); ++i) logits[i] = float((i * 7919 + NE) % 5);
        logits[3] = std::nanf("");  // a NaN ranks below every number
        for (int64_t e = 0; e < NE; ++e) logits[size_t(2 * NE + e)] = 1.0f;  // all equal
        // Overflowed router logits (an upstream inf or NaN): every probability NaN, and the ids
        // must still be experts (the host picks the lowest untaken ones), never out of range.
        for (int64_t e = 0; e < NE; ++e) logits[size_t(4 * NE + e)] = std::nanf("");
        logits[size_t(5 * NE + 1)] = logits[size_t(5 * NE + NE - 1)] = INFINITY;
        std::vector<int32_t> want_ids(static_cast<size_t>(T * K));
        std::vector<float> want_w(static_cast<size_t>(T * K));
        kernels::route_top_k(logits.data(), T, NE, K, renorm, want_ids.data(), want_w.data());
        int32_t* ids = dev_ints(*backend_, T * K, owned_);
        float* w = poisoned(T * K);
        const float* d_logits = dev(logits);
        backend_->synchronize();  // the launch below is on the default stream, not the backend's
        ASSERT_EQ(cuda::launch_moe_route(d_logits, T, NE, K, renorm, ids, w, nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<int32_t> got_ids(static_cast<size_t>(T * K));
        backend_->download(reinterpret_cast<float*>(got_ids.data()),
                           reinterpret_cast<const float*>(ids), T * K);
        EXPECT_EQ(got_ids, want_ids) << NE << " experts, top-" << K << " renorm " << renorm;
        const auto got_w = get(w, T * K);
        for (size_t i = 0; i < got_w.size(); ++i) {
          if (std::isnan(want_w[i])) {
            EXPECT_TRUE(std::isnan(got_w[i])) << i;
            continue;
          }
          EXPECT_NEAR(got_w[i], want_w[i], 1e-6f) << i;  // expf and exp may differ by an ulp
        }
      }
}

// Random expert bytes of dtype t (MXFP4 quantized from random floats, the others as the matmul
// tests make them).
std::vector<uint8_t> expert_bytes(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  if (t != DType::MXFP4) return random_weight_bytes(t, rows, cols, seed);
  const auto f = random_floats(size_t(rows * cols), seed, -0.05f, 0.05f);
  std::vector<uint8_t> out(size_t(rows * cols / 32 * 17));
  kernels::ref::quantize_mxfp4(f.data(), out.data(), rows * cols);
  return out;
}

struct MoeCase {
  DType type;
  bool gpt_oss = false;  // biases and the clamped SwiGLU
};

class CudaMoeTest : public CudaTest {
 protected:
  void check_moe(const MoeCase& c, int64_t T, double bound);
};

// moe_ffn on the device against the float64 block: route (host rule) over x . R^T, then each
// selected expert's dense matmuls over its dequantized rows.
void CudaMoeTest::check_moe(const MoeCase& c, int64_t T, double bound) {
  Backend& b = *backend_;
  CudaMoeTest& f = *this;
  const int64_t E = 256, F = 256, NE = 8, K = 2;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Weight> gate, up, down;
  for (int64_t e = 0; e < NE; ++e) {
    for (auto [list, rows, cols] :
         {std::tuple{&gate, F, E}, std::tuple{&up, F, E}, std::tuple{&down, E, F}}) {
      bytes.push_back(expert_bytes(c.type, rows, cols, uint32_t(100 * e + rows + cols)));
      list->push_back(make_weight(c.type, rows, cols, bytes.back()));
      list->back().host.name += "#" + std::to_string(e) + "." + std::to_string(list->size());
    }
  }
  auto router_bytes = random_weight_bytes(DType::F32, NE, E, 7);
  Weight router = make_weight(DType::F32, NE, E, router_bytes);
  router.host.name = "router";
  for (auto* list : {&gate, &up, &down})
    for (Weight& w : *list) ASSERT_TRUE(b.prepare_weight(w).is_ok());
  ASSERT_TRUE(b.prepare_weight(router).is_ok());
  const auto x = random_floats(size_t(T * E), uint32_t(T), -1.f, 1.f);
  const auto res = random_floats(size_t(T * E), uint32_t(T + 1), -1.f, 1.f);
  std::vector<float> rbias, gb, ub, db;
  std::vector<float*> gbp, ubp, dbp;
  const float alpha = 1.702f, limit = 7.0f;
  if (c.gpt_oss) {
    rbias = random_floats(size_t(NE), 11, -0.5f, 0.5f);
    gb = random_floats(size_t(NE * F), 12, -0.2f, 0.2f);
    ub = random_floats(size_t(NE * F), 13, -0.2f, 0.2f);
    db = random_floats(size_t(NE * E), 14, -0.2f, 0.2f);
    for (int64_t e = 0; e < NE; ++e) {
      gbp.push_back(f.dev(std::vector<float>(gb.begin() + e * F, gb.begin() + (e + 1) * F)));
      ubp.push_back(f.dev(std::vector<float>(ub.begin() + e * F, ub.begin() + (e + 1) * F)));
      dbp.push_back(f.dev(std::vector<float>(db.begin() + e * E, db.begin() + (e + 1) * E)));
    }
  }
  // The float64 reference.
  const auto R = cpu_dequant(router);
  auto logits = reference_matmul(R, x, NE, E, T);
  if (c.gpt_oss)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < NE; ++e) logits[size_t(t * NE + e)] += rbias[size_t(e)];
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> wts(static_cast<size_t>(T * K));
  kernels::route_top_k(logits.data(), T, NE, K, true, ids.data(), wts.data());
  std::vector<double> want(res.begin(), res.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = ids[size_t(t * K + j)];
      const std::vector<float> xt(x.begin() + t * E, x.begin() + (t + 1) * E);
      auto g = reference_matmul(cpu_dequant(gate[size_t(e)]), xt, F, E, 1);
      auto u = reference_matmul(cpu_dequant(up[size_t(e)]), xt, F, E, 1);
      std::vector<float> h(static_cast<size_t>(F));
      for (int64_t i = 0; i < F; ++i) {
        double gv = g[size_t(i)], uv = u[size_t(i)];
        if (c.gpt_oss) {
          gv = std::min(gv + gb[size_t(e * F + i)], double(limit));
          uv = std::clamp(uv + ub[size_t(e * F + i)], -double(limit), double(limit));
          h[size_t(i)] = float((uv + 1) * gv / (1 + std::exp(-alpha * gv)));
        } else {
          h[size_t(i)] = float(gv / (1 + std::exp(-gv)) * uv);
        }
      }
      const auto y = reference_matmul(cpu_dequant(down[size_t(e)]), h, E, F, 1);
      for (int64_t i = 0; i < E; ++i)
        want[size_t(t * E + i)] += double(wts[size_t(t * K + j)]) *
                                   (y[size_t(i)] + (c.gpt_oss ? db[size_t(e * E + i)] : 0.0));
    }
  Backend::MoeBlock m;
  m.x = f.dev(x);
  m.out = f.dev(res);
  m.accumulate = true;
  m.n_tokens = T, m.n_embd = E, m.n_ff = F, m.n_expert = NE, m.n_used = K;
  m.router = &router;
  m.router_bias = c.gpt_oss ? f.dev(rbias) : nullptr;
  m.gate = gate, m.up = up, m.down = down;
  m.gate_bias = gbp, m.up_bias = ubp, m.down_bias = dbp;
  m.act = c.gpt_oss ? Backend::GatedAct::kSwigluClamped : Backend::GatedAct::kSilu;
  m.swiglu_alpha = alpha, m.swiglu_limit = limit;
  m.logits = f.poisoned(T * NE);
  m.gate_rows = f.poisoned(T * F), m.up_rows = f.poisoned(T * F);
  m.in_rows = f.poisoned(T * E), m.out_rows = f.poisoned(T * E);
  b.begin_pass(T <= 4 ? Backend::Phase::kDecode : Backend::Phase::kPrefill, T);
  b.moe_ffn(m);
  const std::vector<float> want_f(want.begin(), want.end());
  const double err = rel_error(f.get(m.out, T * E), want_f);
  EXPECT_LT(err, bound) << dtype_name(c.type) << (c.gpt_oss ? " gpt-oss" : "") << " T=" << T;
  // Experts never take fp16 copies (CudaOptions::half_weights: dense weights only), whatever
  // their token counts.
  for (auto* list : {&gate, &up, &down})
    for (const Weight& w : *list)
      EXPECT_EQ(static_cast<const PreparedWeight*>(w.backend_data.get())->dw.w16, nullptr)
          << w.host.name << " T=" << T;
}

// Q4_0, Q4_K and Q8_0 take the int8 gather-GEMVs: x and h each rounded to int8 blocks (the
// dense int8 GEMV test's bounds, twice); the f32 path (F16, BF16, MXFP4) only sums in f32.
TEST_F(CudaMoeTest, MoeGatherGemvMatchesDensePerExpertMatmuls) {
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::F16, DType::BF16, DType::MXFP4})
    for (int64_t T : {1, 3}) {
      const double bound = !cuda::moe_gemv_int8_supports(t, 256, 256) ? 2e-5
                           : t == DType::Q8_0                         ? 4e-4
                                                                      : 3e-2;
      check_moe({t}, T, bound);
    }
  check_moe({DType::MXFP4, true}, 1, 2e-5);
  check_moe({DType::BF16, true}, 2, 2e-5);
}

// Prefill: the grouped path runs the backend's matmuls (fp16 tensor-core GEMMs, int8-activation
// GEMVs for experts with a few rows), hence the bound of those matmuls' own tests.
TEST_F(CudaMoeTest, MoeGroupedPrefillMatchesDensePerExpertMatmuls) {
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::F16, DType::BF16, DType::MXFP4})
    check_moe({t}, 37, 2e-2);
  check_moe({DType::MXFP4, true}, 70, 2e-2);
  check_moe({DType::Q4_0}, 400, 2e-2);  // ~100 rows an expert: the dense path's copy size
}

// MXFP4 on the device decodes exactly as the scalar reference (every scale byte, both signs of
// every code): the embedding op reads rows through the same dq8 the GEMVs use.
TEST_F(CudaTest, Mxfp4DequantIsBitExact) {
  const int64_t rows = 256, cols = 64;  // 512 blocks: scale bytes 0..255 twice
  std::vector<uint8_t> bytes(size_t(rows * cols / 32 * 17));
  std::mt19937 rng(5);
  for (size_t b = 0; b < bytes.size() / 17; ++b) {
    bytes[b * 17] = uint8_t(b % 256);
    for (int i = 1; i < 17; ++i) bytes[b * 17 + size_t(i)] = uint8_t(rng());
  }
  Weight w = make_weight(DType::MXFP4, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  const auto want = cpu_dequant(w);
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) ids[size_t(r)] = int32_t(r);
  float* out = poisoned(rows * cols);
  backend_->embed(w, ids.data(), rows, out);
  const auto got = get(out, rows * cols);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << i << ": " << got[i] << " vs " << want[i];
}

TEST_F(CudaTest, Mxfp4MatmulMatchesReference) {
  for (int64_t T : {1, 4, 40}) {
    const int64_t rows = 96, cols = 512;
    auto bytes = expert_bytes(DType::MXFP4, rows, cols, uint32_t(T));
    Weight w = make_weight(DType::MXFP4, rows, cols, bytes);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
    const auto x = random_floats(size_t(T * cols), uint32_t(T + 3));
    const auto want = reference_matmul(cpu_dequant(w), x, rows, cols, T);
    float* y = poisoned(T * rows);
    backend_->begin_pass(T <= 4 ? Backend::Phase::kDecode : Backend::Phase::kPrefill, T);
    backend_->matmul(w, dev(x), T, y);
    EXPECT_LT(rel_error(get(y, T * rows), want), T <= 4 ? 1e-5 : 2e-3) << "T=" << T;
  }
}

}  // namespace
}  // namespace hearth::test
