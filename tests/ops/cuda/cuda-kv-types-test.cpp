// Typed KV caches (f16, bf16, q8_0: kernels/cuda/kv-rows.cuh) and attention sinks on the CUDA
// backend, against the CPU backend over the same rows: the append (linear and ring) byte for
// byte; decode (split-K), small-batch, prefill (tensor cores and fp32 tiles) and masked (window,
// soft-cap, ring) attention over typed rows, with and without sinks; and rope_append_attend's
// fused forms (rope + append inside the decode attention kernel in a captured step, the prefill
// rope + append launch) against the CPU's plain ops. Outputs are poisoned with NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "cuda-test-util.h"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/cuda-ops.h"

namespace hearth::test {
namespace {

using kernels::AttentionMask;
using kernels::KvRows;

struct TypePair {
  DType k, v;
};
// Every type, and K and V of different types (the kernels' mixed form).
constexpr TypePair kPairs[] = {{DType::F32, DType::F32},   {DType::F16, DType::F16},
                               {DType::BF16, DType::BF16}, {DType::Q8_0, DType::Q8_0},
                               {DType::F16, DType::Q8_0},  {DType::BF16, DType::F32}};

std::string pair_name(const TypePair& p) {
  return std::string(dtype_name(p.k)) + "/" + dtype_name(p.v);
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows of one type held as floats (Backend moves floats): the host copy and the device one.
struct Rows {
  DType type = DType::F32;
  std::vector<float> host;
  float* dev = nullptr;
  KvRows h() const { return {host.data(), type}; }
  KvRows d() const { return {dev, type}; }
};

class CudaKvTypesTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    cpu_ = make_cpu_backend(2);
  }
  // rows x n elements of type t: `values` as the CPU stores them, on both sides.
  Rows make_rows(DType t, int64_t rows, int64_t n, const std::vector<float>& values) {
    Rows r;
    r.type = t;
    r.host.assign(size_t(floats_for(rows * kernels::kv_row_bytes(t, n))), 0.f);
    kernels::store_kv_rows(t, values.data(), r.host.data(), rows, n);
    r.dev = dev(r.host);
    return r;
  }
  std::unique_ptr<Backend> cpu_;
};

// Values that exercise the conversions: a zero block (q8_0 scale 0), fp16 subnormals and
// overflow-free large values, exact ties of every rounding, both signs.
std::vector<float> store_values(int64_t n, uint32_t seed) {
  auto v = random_floats(size_t(n), seed, -4.f, 4.f);
  for (int64_t i = 0; i < std::min<int64_t>(32, n); ++i) v[size_t(i)] = 0.f;
  for (int64_t i = 32; i + 4 < n; i += 37) {
    v[size_t(i)] = 3e-6f * float(i % 7);  // fp16 subnormal
    v[size_t(i + 1)] = 1000.25f;          // an fp16 tie (spacing 0.5 at 1000)
    v[size_t(i + 2)] = -2.0009765625f;    // an fp16 tie (2 + 2^-10; spacing 2^-9 at 2)
    v[size_t(i + 3)] = 1.00390625f;       // a bf16 tie (1 + 2^-8)
  }
  return v;
}

// store_kv of every type, linear and into a ring that wraps, leaves the GPU cache byte for byte
// as the CPU's (so saved rows and prefix copies move between backends); rows outside the
// append keep their poison.
TEST_F(CudaKvTypesTest, StoreMatchesCpuBytes) {
  const int64_t n = 96, T = 5, pos = 4;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t ring : {int64_t(0), int64_t(7)}) {
      const int64_t rows = ring > 0 ? ring : 20;
      const std::vector<float> poison(size_t(floats_for(rows * kernels::kv_row_bytes(t, n))),
                                      std::numeric_limits<float>::quiet_NaN());
      std::vector<float> host = poison;
      float* d = dev(poison);
      const auto src = store_values(T * n, uint32_t(ring + int(t)));
      cpu_->store_kv(host.data(), t, src.data(), pos, n, T, ring);
      backend_->store_kv(d, t, dev(src), pos, n, T, ring);
      EXPECT_TRUE(same_bytes(get(d, int64_t(host.size())), host))
          << dtype_name(t) << " ring " << ring;
    }
}

struct AttnCase {
  int64_t T, pos0, heads, kv_heads, hd;
};
// Decode over several split chunks (GQA, head sizes 128 and 64), a small batch on the split
// path, prefill on the tensor cores (64 / 128, off the tile grid) and on the fp32 tiles (96).
// Decode kernel (attention-decode.cu): one position; groups of 8 (hd 64), 4, 2 (hd 256) and 3
// (one head a block) over many tiles per split, partial last tiles.
const AttnCase kAttnCases[] = {{1, 700, 4, 2, 128}, {1, 40, 8, 8, 64},    {3, 200, 4, 1, 64},
                               {70, 30, 4, 2, 128}, {33, 0, 4, 4, 64},    {20, 10, 2, 1, 96},
                               {1, 130, 2, 2, 32},  {9, 300, 8, 2, 128},  {1, 0, 4, 4, 128},
                               {1, 3000, 8, 1, 64}, {1, 1500, 4, 2, 256}, {1, 90, 6, 2, 128},
                               {1, 17, 2, 1, 256}};

// Attention over typed rows (and with sinks: attention_masked with only sinks set, which keeps
// the split-K / tensor-core kernels) against the CPU's typed kernels over the same rows.
TEST_F(CudaKvTypesTest, AttentionOverTypedRowsMatchesCpu) {
  for (const AttnCase& c : kAttnCases)
    for (const TypePair& p : kPairs)
      for (bool sinks : {false, true}) {
        const int64_t ctx = c.pos0 + c.T, kvd = c.kv_heads * c.hd, qn = c.T * c.heads * c.hd;
        const auto q = random_floats(size_t(qn), uint32_t(c.T + c.hd), -2.f, 2.f);
        const Rows k = make_rows(p.k, ctx, kvd, random_floats(size_t(ctx * kvd), 11, -2.f, 2.f));
        const Rows v = make_rows(p.v, ctx, kvd, random_floats(size_t(ctx * kvd), 12));
        const auto sink_logits = random_floats(size_t(c.heads), 13, -1.f, 4.f);
        const float scale = 1.f / std::sqrt(float(c.hd));
        std::vector<float> want(static_cast<size_t>(qn));
        float* out = poisoned(qn);
        if (sinks) {
          AttentionMask hm, dm;
          hm.sinks = sink_logits.data();
          dm.sinks = dev(sink_logits);
          cpu_->attention_masked(q.data(), k.h(), v.h(), want.data(), c.T, c.pos0, c.heads,
                                 c.kv_heads, c.hd, scale, hm);
          backend_->attention_masked(dev(q), k.d(), v.d(), out, c.T, c.pos0, c.heads, c.kv_heads,
                                     c.hd, scale, dm);
        } else {
          cpu_->attention(q.data(), k.h(), v.h(), want.data(), c.T, c.pos0, c.heads, c.kv_heads,
                          c.hd, scale);
          backend_->attention(dev(q), k.d(), v.d(), out, c.T, c.pos0, c.heads, c.kv_heads, c.hd,
                              scale);
        }
        EXPECT_LT(rel_error(get(out, qn), want), 5e-5)
            << pair_name(p) << " T " << c.T << " pos0 " << c.pos0 << " hd " << c.hd << " sinks "
            << sinks;
        ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
      }
}

// The decode kernel (attention-decode.cu) launched directly: one head a block and groups, its
// grid probed (splits per row, tiles round-robin or in runs), against the CPU over the same
// typed rows.
TEST_F(CudaKvTypesTest, DecodeKernelProbesMatchCpu) {
  const AttnCase cases[] = {{1, 700, 4, 4, 128},  {1, 0, 2, 2, 64},
                            {1, 1000, 2, 2, 256}, {1, 333, 8, 2, 64},
                            {1, 95, 3, 3, 128},   {1, 500, 14, 2, 128},  // 7 heads a KV head
                            {1, 260, 10, 2, 64},                         // 5
                            {1, 150, 16, 1, 64},                         // 16: two blocks of 8
                            {1, 300, 16, 2, 128}};  // 8 over a short cache: blocks of 2
  struct Probe {
    int splits;
    bool runs, scalar;
  };
  // Both kernels where the tensor-core one applies (f16 / q8_0, head_dim 64 / 128).
  const Probe probes[] = {{0, false, false}, {3, false, false}, {5, true, false},
                          {64, true, false}, {0, false, true},  {5, true, true}};
  for (const AttnCase& c : cases)
    for (DType t : {DType::F16, DType::BF16, DType::Q8_0}) {
      const int64_t ctx = c.pos0 + 1, kvd = c.kv_heads * c.hd, qn = c.heads * c.hd;
      const auto q = random_floats(size_t(qn), uint32_t(c.pos0 + c.hd), -2.f, 2.f);
      const Rows k = make_rows(t, ctx, kvd, random_floats(size_t(ctx * kvd), 21, -2.f, 2.f));
      const Rows v = make_rows(t, ctx, kvd, random_floats(size_t(ctx * kvd), 22));
      const float scale = 1.f / std::sqrt(float(c.hd));
      std::vector<float> want(static_cast<size_t>(qn));
      cpu_->attention(q.data(), k.h(), v.h(), want.data(), 1, c.pos0, c.heads, c.kv_heads, c.hd,
                      scale);
      const int64_t parts = cuda::attention_partials_floats(1, c.heads, c.hd, ctx);
      float* partials = dev(std::vector<float>(size_t(parts), 0.f));  // counters start at zero
      for (const auto& [splits, runs, scalar] : probes) {
        float* out = poisoned(qn);
        const float* qd = dev(q);
        // The uploads run on the backend's stream; the launch below on the default one.
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cuda::launch_attention_probe(qd, k.dev, v.dev, out, c.pos0, nullptr, ctx, c.heads,
                                               c.kv_heads, c.hd, scale, partials, nullptr, nullptr,
                                               nullptr, {t, t, nullptr}, splits, runs, scalar),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_LT(rel_error(get(out, qn), want), 5e-5)
            << dtype_name(t) << " pos0 " << c.pos0 << " heads " << c.heads << "/" << c.kv_heads
            << " hd " << c.hd << " splits " << splits << " runs " << runs << " scalar " << scalar;
      }
    }
}

// The decode kernels with AttentionMask's window, ring and soft-cap (AttnKv), both kernels and
// their grid probes, with and without sinks, against the CPU's masked attention over the same
// rows: a window inside a plain cache, a ring that wrapped (its oldest rows out of the window), a
// window wider than the context so far, a soft-cap alone.
TEST_F(CudaKvTypesTest, DecodeKernelMasksMatchCpu) {
  struct MaskCase {
    int64_t pos0, heads, kv_heads, hd;
    int window, ring;
    float softcap;
  };
  const MaskCase cases[] = {{700, 4, 4, 128, 100, 0, 0.f},     {333, 8, 2, 64, 128, 160, 0.f},
                            {1000, 2, 2, 256, 300, 340, 30.f}, {40, 16, 2, 128, 64, 96, 20.f},
                            {95, 3, 3, 128, 0, 0, 5.f},        {2000, 64, 8, 64, 128, 640, 0.f},
                            {500, 14, 2, 128, 33, 65, 50.f}};
  struct Probe {
    int splits;
    bool runs, scalar;
  };
  const Probe probes[] = {{0, false, false}, {5, true, false}, {0, false, true}, {3, false, true}};
  for (const MaskCase& c : cases)
    for (DType t : {DType::F16, DType::BF16, DType::Q8_0})
      for (bool sinks : {false, true}) {
        const int64_t ctx = c.pos0 + 1, rows = c.ring > 0 ? c.ring : ctx;
        const int64_t kvd = c.kv_heads * c.hd, qn = c.heads * c.hd;
        const auto q = random_floats(size_t(qn), uint32_t(c.pos0 + c.hd), -3.f, 3.f);
        const Rows k = make_rows(t, rows, kvd, random_floats(size_t(rows * kvd), 41, -3.f, 3.f));
        const Rows v = make_rows(t, rows, kvd, random_floats(size_t(rows * kvd), 42));
        const auto sink_logits = random_floats(size_t(c.heads), 43, -1.f, 4.f);
        const float scale = 1.f / std::sqrt(float(c.hd));
        AttentionMask hm;
        hm.window = c.window, hm.ring_rows = c.ring, hm.softcap = c.softcap;
        if (sinks) hm.sinks = sink_logits.data();
        std::vector<float> want(static_cast<size_t>(qn));
        cpu_->attention_masked(q.data(), k.h(), v.h(), want.data(), 1, c.pos0, c.heads, c.kv_heads,
                               c.hd, scale, hm);
        const int64_t parts = cuda::attention_partials_floats(1, c.heads, c.hd, ctx);
        float* partials = dev(std::vector<float>(size_t(parts), 0.f));
        cuda::AttnKv kv{t, t, sinks ? dev(sink_logits) : nullptr, c.window, c.ring, c.softcap};
        for (const auto& [splits, runs, scalar] : probes) {
          float* out = poisoned(qn);
          const float* qd = dev(q);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cuda::launch_attention_probe(
                        qd, k.dev, v.dev, out, c.pos0, nullptr, ctx, c.heads, c.kv_heads, c.hd,
                        scale, partials, nullptr, nullptr, nullptr, kv, splits, runs, scalar),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_LT(rel_error(get(out, qn), want), 5e-5)
              << dtype_name(t) << " pos0 " << c.pos0 << " heads " << c.heads << "/" << c.kv_heads
              << " hd " << c.hd << " window " << c.window << " ring " << c.ring << " softcap "
              << c.softcap << " sinks " << sinks << " splits " << splits << " runs " << runs
              << " scalar " << scalar;
        }
      }
  // The other kernels ignore a mask: launch_attention refuses it where they would run.
  const std::vector<float> z(size_t(4 * 64 * 40), 0.f);
  float* d = dev(z);
  EXPECT_EQ(cuda::launch_attention(d, d, d, d, 4, 0, nullptr, 4, 1, 1, 64, 1.f, d, nullptr, nullptr,
                                   nullptr, cuda::AttnKv{DType::F16, DType::F16, nullptr, 2}),
            cudaErrorInvalidValue);
}

// attention_masked's kernel (window, soft-cap, a ring that wrapped) over typed rows, with and
// without sinks, decode and a small prefill.
TEST_F(CudaKvTypesTest, MaskedAttentionOverTypedRowsMatchesCpu) {
  const int64_t heads = 4, kv_heads = 2, hd = 64, window = 6, ring = 12, kvd = kv_heads * hd;
  for (const TypePair& p : kPairs)
    for (int64_t T : {int64_t(1), int64_t(4)})
      for (bool sinks : {false, true}) {
        const int64_t pos0 = 30, qn = T * heads * hd;
        const auto q = random_floats(size_t(qn), uint32_t(T), -2.f, 2.f);
        const Rows k = make_rows(p.k, ring, kvd, random_floats(size_t(ring * kvd), 21, -2.f, 2.f));
        const Rows v = make_rows(p.v, ring, kvd, random_floats(size_t(ring * kvd), 22));
        const auto sink_logits = random_floats(size_t(heads), 23, -1.f, 4.f);
        AttentionMask hm;
        hm.window = window, hm.softcap = 5.f, hm.ring_rows = ring;
        AttentionMask dm = hm;
        if (sinks) hm.sinks = sink_logits.data(), dm.sinks = dev(sink_logits);
        std::vector<float> want(static_cast<size_t>(qn));
        float* out = poisoned(qn);
        cpu_->attention_masked(q.data(), k.h(), v.h(), want.data(), T, pos0, heads, kv_heads, hd,
                               0.125f, hm);
        backend_->attention_masked(dev(q), k.d(), v.d(), out, T, pos0, heads, kv_heads, hd, 0.125f,
                                   dm);
        EXPECT_LT(rel_error(get(out, qn), want), 1e-5)
            << pair_name(p) << " T " << T << " sinks " << sinks;
      }
}

// One layer's q, k, v for rope_append_attend at positions pos0...
struct BlockInputs {
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};
BlockInputs block_inputs(int64_t T, int64_t pos0, int64_t heads, int64_t kv_heads, int64_t hd,
                         uint32_t seed) {
  BlockInputs b;
  b.q = random_floats(size_t(T * heads * hd), seed, -3.f, 3.f);
  b.k = random_floats(size_t(T * kv_heads * hd), seed + 1, -3.f, 3.f);
  b.v = random_floats(size_t(T * kv_heads * hd), seed + 2, -3.f, 3.f);
  for (int64_t t = 0; t < T; ++t) b.pos.push_back(int32_t(pos0 + t));
  return b;
}

// rope_append_attend over typed caches, against the CPU backend's plain ops (rope, store_kv,
// attention) on its own copies: decode steps inside begin/end_decode_step (the rope and append
// fused into the split-K kernel, captured, then replayed at new positions), a prefill pass (the
// rope + append launch, then the tensor cores) and a small batch (the plain ops), with sinks.
// Masked: a sliding layer's (a window of 40 over a ring of 112 rows that wraps, a soft-cap) with
// YaRN's scaled rotation, whose decode steps the decode kernels take fused as well.
// The caches are compared widened: a rope ulp may flip a rounding of a stored element.
TEST_F(CudaKvTypesTest, RopeAppendAttendOverTypedCachesMatchesCpu) {
  const int64_t heads = 8, kv_heads = 2, cap = 160, window = 40, ring = 112;
  for (bool masked : {false, true})
    for (int64_t hd : {int64_t(128), int64_t(64)})
      for (const TypePair& p : kPairs) {
        const int64_t kvd = kv_heads * hd, qd = heads * hd, rows = masked ? ring : cap;
        const auto start = random_floats(size_t(rows * kvd), 31, -1.f, 1.f);
        Rows gk = make_rows(p.k, rows, kvd, start), gv = make_rows(p.v, rows, kvd, start);
        std::vector<float> ck = gk.host, cv = gv.host;
        const auto sink_logits = random_floats(size_t(heads), 33, -1.f, 4.f);
        float* sinks_dev = dev(sink_logits);
        std::vector<float> inv(size_t(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i)
          inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(hd)));
        // The decode steps' buffers: a captured step replays over the same pointers.
        float *dq = poisoned(qd), *dk = poisoned(kvd), *dv = poisoned(kvd), *dout = poisoned(qd);
        // A prefill of 70 tokens, 3 more, then decode steps to position 150 (a third chunk).
        int64_t pos = 0;
        for (int64_t T : {int64_t(70), int64_t(3), int64_t(1)}) {
          const int64_t steps = T == 1 ? 150 - pos : 1;
          for (int64_t s = 0; s < steps; ++s) {
            const BlockInputs in = block_inputs(T, pos, heads, kv_heads, hd, uint32_t(pos + hd));
            const int64_t ring_rows = masked ? ring : 0;
            const Backend::KvSegment gseg{gk.dev, p.k, gv.dev, p.v, pos, T, ring_rows};
            const Backend::KvSegment cseg{ck.data(), p.k, cv.data(), p.v, pos, T, ring_rows};
            Backend::AttentionBlock a;
            if (T == 1) {
              backend_->upload(dq, in.q.data(), qd);
              backend_->upload(dk, in.k.data(), kvd);
              backend_->upload(dv, in.v.data(), kvd);
              a.q = dq, a.k = dk, a.v = dv, a.out = dout;
            } else {
              a.q = dev(in.q), a.k = dev(in.k), a.v = dev(in.v), a.out = poisoned(T * qd);
            }
            a.host_pos = in.pos.data();
            a.n_tokens = T, a.n_heads = heads, a.n_kv_heads = kv_heads, a.head_dim = hd;
            a.scale = 1.f / std::sqrt(float(hd));
            a.rope = {inv.data(), kernels::RopeStyle::kHalves, hd, masked ? 1.25f : 1.f, masked};
            a.sinks = sinks_dev;
            if (masked) a.window = window, a.softcap = 20.f;
            a.segments = {&gseg, 1};
            if (T == 1) {
              // Inputs uploaded before the step: a replay reads them from the same buffers.
              const bool replayed = backend_->begin_decode_step(0, pos, cap);
              if (!replayed) {
                backend_->begin_pass(Backend::Phase::kDecode, 1);
                backend_->rope_append_attend(a);
              }
              backend_->end_decode_step();
            } else {
              backend_->begin_pass(Backend::Phase::kPrefill, T);
              backend_->rope_append_attend(a);
            }
            std::vector<float> q = in.q, k = in.k, out(size_t(T * qd));
            Backend::AttentionBlock c = a;
            c.q = q.data(), c.k = k.data(), c.v = in.v.data(), c.out = out.data();
            c.sinks = sink_logits.data();
            c.segments = {&cseg, 1};
            cpu_->rope_append_attend(c);
            const std::string what = pair_name(p) + " hd " + std::to_string(hd) + " T " +
                                     std::to_string(T) + " pos " + std::to_string(pos) +
                                     (masked ? " masked" : "");
            // A rope ulp may flip a stored element's rounding: q8_0 by a step of its block, bf16
            // by 2^-8 of it (measured on the H200: 1.3e-4 at bf16, hd 128, position 141).
            const bool q8 = p.k == DType::Q8_0 || p.v == DType::Q8_0;
            const bool bf16 = p.k == DType::BF16 || p.v == DType::BF16;
            const double tol = q8 ? 3e-3 : bf16 ? 1e-3 : 1e-4;
            ASSERT_LT(rel_error(get(a.out, T * qd), out), tol) << what;
            ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
            pos += T;
          }
        }
        EXPECT_LT(rel_error(widen_kv_rows(p.k, get(gk.dev, int64_t(ck.size())), rows, kvd),
                            widen_kv_rows(p.k, ck, rows, kvd)),
                  1e-3)
            << pair_name(p) << " K cache, hd " << hd << (masked ? " masked" : "");
        EXPECT_LT(rel_error(widen_kv_rows(p.v, get(gv.dev, int64_t(cv.size())), rows, kvd),
                            widen_kv_rows(p.v, cv, rows, kvd)),
                  1e-6)
            << pair_name(p) << " V cache (no rope: stored alike), hd " << hd
            << (masked ? " masked" : "");
        backend_->reset_decode_steps();
      }
}

}  // namespace
}  // namespace hearth::test
