// Prefill attention on the tensor cores (attention-prefill.cu) against the CPU kernel: both
// precisions launched directly, and the backend's dispatch; the prefill rope and its fused K/V
// append (rope-prefill.cu).
// Add a shape to kPrefillCases.
// Outputs are poisoned with NaN (and a poisoned tail past the output must stay untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda-test-util.h"
#include "kernels/cuda/cuda-ops.h"

namespace hearth::test {
namespace {

struct PrefillCase {
  int64_t T, pos0, heads, kv_heads, hd;
};

// Full 512-token pass; odd counts crossing the 64-query / 64-key tiles; pos0 off the tile grid;
// the smallest prefill (8 tokens); a long earlier context; GQA groups of 2 and 4.
const PrefillCase kPrefillCases[] = {
    {512, 0, 4, 4, 128}, {130, 70, 4, 2, 64}, {8, 0, 2, 1, 128},    {65, 1000, 2, 2, 128},
    {100, 0, 8, 2, 64},  {64, 64, 1, 1, 128}, {200, 13, 3, 1, 128}, {9, 55, 4, 4, 64},
};

struct PrefillData {
  std::vector<float> q, k, v, want;
};

PrefillData make_case(const PrefillCase& c, ThreadPool& pool) {
  PrefillData d;
  const int64_t ctx = c.pos0 + c.T;
  d.q = random_floats(size_t(c.T * c.heads * c.hd), uint32_t(40 + c.T), -2.f, 2.f);
  d.k = random_floats(size_t(ctx * c.kv_heads * c.hd), uint32_t(50 + c.T), -2.f, 2.f);
  d.v = random_floats(size_t(ctx * c.kv_heads * c.hd), uint32_t(60 + c.T));
  d.want.resize(d.q.size());
  kernels::attention(d.q.data(), d.k.data(), d.v.data(), d.want.data(), c.T, c.pos0, c.heads,
                     c.kv_heads, c.hd, 1.f / std::sqrt(float(c.hd)), pool);
  return d;
}

// hi + lo halves keep ~22 bits: at the fp32 kernel's bound; a wrong fragment, mask or tile
// offset errs by tens of percent.
constexpr double kTolerance = 2e-5;

TEST_F(CudaTest, PrefillAttentionTensorCoresMatchCpu) {
  ThreadPool pool(2);
  for (const auto& c : kPrefillCases) {
    const PrefillData d = make_case(c, pool);
    const int64_t n = int64_t(d.q.size());
    constexpr int64_t kTail = 64;
    float* out = poisoned(n + kTail);
    float *q = dev(d.q), *k = dev(d.k), *v = dev(d.v);
    // Small uploads are queued on the backend's own (non-blocking) stream: let them land
    // before a launch on the legacy stream reads them.
    backend_->synchronize();
    ASSERT_EQ(cuda::launch_attention_prefill_tc(q, k, v, out, c.T, c.pos0, c.heads, c.kv_heads,
                                                c.hd, 1.f / std::sqrt(float(c.hd)), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got = get(out, n + kTail);
    for (int64_t i = n; i < n + kTail; ++i)
      ASSERT_TRUE(std::isnan(got[size_t(i)])) << "wrote past the output at " << i;
    got.resize(size_t(n));
    EXPECT_LT(rel_error(got, d.want), kTolerance) << "T " << c.T << " pos0 " << c.pos0 << " heads "
                                                  << c.heads << "/" << c.kv_heads << " hd " << c.hd;
  }
}

// Per query row too: a mask error on the first rows of a tile barely moves the global norm.
TEST_F(CudaTest, PrefillAttentionTensorCoresEveryRowMatches) {
  ThreadPool pool(2);
  const PrefillCase c{150, 7, 2, 1, 128};
  const PrefillData d = make_case(c, pool);
  float* out = poisoned(int64_t(d.q.size()));
  float *q = dev(d.q), *k = dev(d.k), *v = dev(d.v);
  backend_->synchronize();  // the uploads ran on the backend's stream
  ASSERT_EQ(cuda::launch_attention_prefill_tc(q, k, v, out, c.T, c.pos0, c.heads, c.kv_heads, c.hd,
                                              1.f / std::sqrt(float(c.hd)), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = get(out, int64_t(d.q.size()));
  const size_t row = size_t(c.hd);
  for (size_t r = 0; r < got.size() / row; ++r) {
    const std::vector<float> g(got.begin() + long(r * row), got.begin() + long((r + 1) * row));
    const std::vector<float> w(d.want.begin() + long(r * row),
                               d.want.begin() + long((r + 1) * row));
    ASSERT_LT(rel_error(g, w), 1e-4) << "row " << r << " (token " << r / size_t(c.heads) << ")";
  }
}

TEST_F(CudaTest, PrefillAttentionTensorCoresRejectsBadShapes) {
  float* buf = poisoned(64 * 128);
  // head_dim 96 has no tensor-core kernel; 3 heads over 2 KV heads is no GQA grouping.
  EXPECT_NE(cuda::launch_attention_prefill_tc(buf, buf, buf, buf, 8, 0, 2, 2, 96, 1.f, nullptr),
            cudaSuccess);
  EXPECT_NE(cuda::launch_attention_prefill_tc(buf, buf, buf, buf, 8, 0, 3, 2, 64, 1.f, nullptr),
            cudaSuccess);
  EXPECT_FALSE(cuda::attention_prefill_tc_supported(96));
  EXPECT_FALSE(cuda::attention_prefill_tc_supported(256));
}

// Through the backend: the dispatch picks the tensor-core kernel for prefill at head_dim 64/128.
TEST_F(CudaTest, PrefillAttentionThroughBackendMatchesCpu) {
  ThreadPool pool(2);
  EXPECT_TRUE(cuda::attention_prefill_tc_supported(64));
  EXPECT_TRUE(cuda::attention_prefill_tc_supported(128));
  for (const auto& c : kPrefillCases) {
    const PrefillData d = make_case(c, pool);
    float* out = poisoned(int64_t(d.q.size()));
    backend_->attention(dev(d.q), dev(d.k), dev(d.v), out, c.T, c.pos0, c.heads, c.kv_heads, c.hd,
                        1.f / std::sqrt(float(c.hd)));
    EXPECT_LT(rel_error(get(out, int64_t(d.q.size())), d.want), kTolerance)
        << "T " << c.T << " pos0 " << c.pos0 << " hd " << c.hd;
  }
}

// Prefill rope (launch_rope_rows through the backend, T > 4): many tokens and heads, both pair
// layouts, a head_dim that is no power of two, positions far apart.
TEST_F(CudaTest, PrefillRopeMatchesCpu) {
  for (auto style : {kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves}) {
    for (int64_t hd : {int64_t(128), int64_t(80)}) {
      const int64_t T = 300, heads = 33;
      auto x = random_floats(size_t(T * heads * hd), uint32_t(hd), -3.f, 3.f);
      std::vector<float> inv(size_t(hd / 2));
      for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
      std::vector<int32_t> pos(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t * 37 % 9000);
      float* d = dev(x);
      backend_->rope(d, T, heads, hd, pos.data(), inv.data(), style);
      kernels::rope(x.data(), T, heads, hd, pos.data(), inv.data(), style);
      EXPECT_LT(rel_error(get(d, T * heads * hd), x), 1e-6) << "hd " << hd;
    }
  }
}

// The named op rope_append_attend in a prefill pass: rope q/k + the K/V append as one launch
// (launch_rope_rows_kv), then attention. Against the CPU backend's default (the plain ops):
// rotated q and k, the cache (rows outside [pos0, pos0 + T) untouched) and the output. Start
// positions 7, 7, 20, 20: the angle table (one per pass) is reused, then must follow new
// positions. f32 and f16 caches (both written by the rope launch itself).
TEST_F(CudaTest, PrefillRopeAppendAttendMatchesCpu) {
  auto cpu = make_cpu_backend(2);
  // Both pair layouts; head_dim 128 and 80 take the rope kernel's 16-byte form, 6 (pairs not a
  // multiple of two) the one-pair form.
  for (DType ct : {DType::F32, DType::F16})
    for (auto style : {kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves})
      for (int64_t hd : {int64_t(128), int64_t(80), int64_t(6)})
        for (int step = 0; step < 4; ++step) {
          const int64_t T = 40, heads = 8, kv_heads = 2, pos0 = step < 2 ? 7 : 20, cap = 64,
                        kvd = kv_heads * hd;
          auto q = random_floats(size_t(T * heads * hd), uint32_t(hd + step), -3.f, 3.f);
          auto k = random_floats(size_t(T * kvd), uint32_t(hd + 10 + step), -3.f, 3.f);
          const auto v = random_floats(size_t(T * kvd), uint32_t(hd + 20 + step), -3.f, 3.f);
          // The caches' rows as the CPU stores them (f16: packed into the floats' bytes).
          const auto cache_rows = [&](uint32_t seed) {
            const auto values = random_floats(size_t(cap * kvd), seed, -1.f, 1.f);
            std::vector<float> rows(size_t(floats_for(cap * kernels::kv_row_bytes(ct, kvd))));
            kernels::store_kv_rows(ct, values.data(), rows.data(), cap, kvd);
            return rows;
          };
          auto kc = cache_rows(5), vc = cache_rows(6);
          std::vector<float> inv(size_t(hd / 2));
          for (int64_t i = 0; i < hd / 2; ++i)
            inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
          std::vector<int32_t> pos(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(pos0 + t);
          float *gpu_kc = dev(kc), *gpu_vc = dev(vc);
          const Backend::KvSegment gpu_seg{gpu_kc, ct, gpu_vc, ct, pos0, T, 0};
          Backend::AttentionBlock a;
          a.q = dev(q), a.k = dev(k), a.v = dev(v), a.out = poisoned(T * heads * hd);
          a.host_pos = pos.data();
          a.n_tokens = T, a.n_heads = heads, a.n_kv_heads = kv_heads, a.head_dim = hd;
          a.scale = 1.f / std::sqrt(float(hd));
          a.rope = {inv.data(), style, hd, 1.f, false};
          a.segments = {&gpu_seg, 1};
          backend_->begin_pass(Backend::Phase::kPrefill, T);
          backend_->rope_append_attend(a);

          std::vector<float> out(size_t(T * heads * hd));
          const Backend::KvSegment cpu_seg{kc.data(), ct, vc.data(), ct, pos0, T, 0};
          Backend::AttentionBlock c = a;
          c.q = q.data(), c.k = k.data(), c.v = v.data(), c.out = out.data();
          c.segments = {&cpu_seg, 1};
          cpu->rope_append_attend(c);
          const std::string what = std::string(dtype_name(ct)) + " hd " + std::to_string(hd) +
                                   " pos0 " + std::to_string(pos0) + " style " +
                                   std::to_string(int(style));
          EXPECT_LT(rel_error(get(a.q, T * heads * hd), q), 1e-6) << what;
          EXPECT_LT(rel_error(get(a.k, T * kvd), k), 1e-6) << what;
          // (f16: a rope ulp may flip an element's rounding; v is stored alike, bit for bit)
          const int64_t n = int64_t(kc.size());
          EXPECT_LT(rel_error(widen_kv_rows(ct, get(gpu_kc, n), cap, kvd),
                              widen_kv_rows(ct, kc, cap, kvd)),
                    ct == DType::F32 ? 1e-6 : 1e-3)
              << what;
          EXPECT_EQ(get(gpu_vc, n), vc) << what;
          EXPECT_LT(rel_error(get(a.out, T * heads * hd), out), kTolerance) << what;
        }
}

}  // namespace
}  // namespace hearth::test
