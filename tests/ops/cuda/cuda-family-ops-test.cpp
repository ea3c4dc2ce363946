// The CUDA backend's family ops (Backend::Feature) against the float64 references of
// kernels/ref/ops-ref.h: per-head RMSNorm, GELU-tanh gate, soft-cap, scale, partial RoPE with an
// attention factor, masked attention (window < tokens, soft-cap, ring caches that wrap, GQA,
// head_dim 16..256), the ring KV append; and a captured decode step of them replayed across a
// ring's wrap, against the same ops run eagerly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda-test-util.h"
#include "kernels/ref/ops-ref.h"

namespace hearth::test {
namespace {

using kernels::AttentionMask;
using kernels::RopeStyle;

TEST_F(CudaTest, RmsnormHeadsMatchesReference) {
  for (int64_t hd : {16, 32, 48, 64, 128, 256})
    for (int64_t rows : {1, 2, 4, 8, 17 * 4}) {
      const auto x = random_floats(size_t(rows * hd), uint32_t(hd + rows), -3.f, 3.f);
      const auto w = random_floats(size_t(hd), 7, 0.5f, 1.5f);
      const auto want = kernels::ref::rmsnorm(x.data(), w.data(), rows, hd, 1e-6);
      float* d = dev(x);
      backend_->rmsnorm_heads(d, dev(w), rows, hd, 1e-6f);
      EXPECT_LT(rel_error(get(d, rows * hd), want), 2e-6) << rows << "x" << hd;
    }
}

// The sandwich post-norm normalises in place (x == y), decode-sized rows included.
TEST_F(CudaTest, RmsnormInPlaceMatchesReference) {
  for (int64_t n : {64, 2304, 4096})
    for (int64_t rows : {1, 3, 17}) {
      const auto x = random_floats(size_t(rows * n), uint32_t(n + rows), -3.f, 3.f);
      const auto w = random_floats(size_t(n), 9, 0.5f, 1.5f);
      const auto want = kernels::ref::rmsnorm(x.data(), w.data(), rows, n, 1e-5);
      float* d = dev(x);
      backend_->rmsnorm(d, dev(w), d, rows, n, 1e-5f);
      EXPECT_LT(rel_error(get(d, rows * n), want), 2e-6) << rows << "x" << n;
    }
}

TEST_F(CudaTest, GeluTanhGatedSoftcapScaleMatchReference) {
  for (int64_t n : {1, 17, 1000, 70001}) {
    const auto g = random_floats(size_t(n), uint32_t(n), -6.f, 6.f);
    const auto u = random_floats(size_t(n), uint32_t(n + 1), -2.f, 2.f);
    const auto want = kernels::ref::gelu_tanh_gated(g.data(), u.data(), n);
    float* dg = dev(g);
    backend_->gelu_tanh_gated(dg, dev(u), dg, n);  // in place, as the forward pass calls it
    EXPECT_LT(rel_error(get(dg, n), want), 2e-6) << "gelu n=" << n;
    float* out = poisoned(n);
    backend_->gelu_tanh_gated(dev(g), dev(u), out, n);
    EXPECT_LT(rel_error(get(out, n), want), 2e-6) << "gelu n=" << n;

    const auto x = random_floats(size_t(n), uint32_t(n + 2), -200.f, 200.f);
    const auto capped = kernels::ref::softcap(x.data(), n, 30.0);
    float* dx = dev(x);
    backend_->softcap(dx, n, 30.f);
    EXPECT_LT(rel_error(get(dx, n), capped), 2e-6) << "softcap n=" << n;
    backend_->scale(dx, n, 11.3137f);
    std::vector<float> scaled(capped);
    for (float& v : scaled) v *= 11.3137f;
    EXPECT_LT(rel_error(get(dx, n), scaled), 1e-6) << "scale n=" << n;
  }
}

TEST_F(CudaTest, RopePartialMatchesReference) {
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalves})
    for (int64_t hd : {32, 64, 128})
      for (int64_t n_rot : {hd, hd / 2, int64_t(16)})
        for (float mscale : {1.0f, 1.1386f})
          for (int64_t T : {1, 5, 33}) {
            const int64_t H = 3;
            const auto x = random_floats(size_t(T * H * hd), uint32_t(hd + n_rot + T));
            std::vector<int32_t> pos(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(1000 + 7 * t);
            std::vector<float> inv(size_t(n_rot / 2));
            for (int64_t i = 0; i < n_rot / 2; ++i)
              inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(n_rot)));
            const auto want = kernels::ref::rope_partial(x.data(), T, H, hd, n_rot, pos.data(),
                                                         inv.data(), style, mscale);
            float* d = dev(x);
            backend_->rope_partial(d, T, H, hd, n_rot, pos.data(), inv.data(), style, mscale);
            EXPECT_LT(rel_error(get(d, T * H * hd), want), 2e-6)
                << "hd " << hd << " n_rot " << n_rot << " T " << T << " mscale " << mscale;
          }
}

struct MaskedCase {
  int64_t T, pos0, H, Hkv, hd, window;
  float softcap;
  int64_t ring;  // 0: a linear cache
};

TEST_F(CudaTest, AttentionMaskedMatchesReference) {
  const MaskedCase cases[] = {
      {1, 100, 8, 2, 128, 16, 50.f, 0},    // decode, window, soft-cap, GQA 4:1
      {1, 700, 4, 2, 64, 32, 0.f, 40},     // decode in a ring that has wrapped many times
      {1, 39, 4, 1, 64, 32, 0.f, 40},      // decode at the ring's last row
      {37, 0, 4, 4, 256, 8, 0.f, 0},       // prefill, window < tokens
      {20, 50, 4, 2, 32, 8, 50.f, 27},     // prefill through a ring's wrap, soft-cap
      {17, 5, 4, 2, 48, 0, 30.f, 0},       // soft-cap only, head_dim 48
      {9, 3, 4, 2, 16, 4, 0.f, 0},         // head_dim 16
      {300, 0, 2, 1, 128, 100, 20.f, 0},   // long prefill, window 100
      {64, 1000, 2, 2, 96, 4096, 0.f, 0},  // window wider than the context
  };
  for (const MaskedCase& c : cases) {
    const int64_t kvd = c.Hkv * c.hd;
    const int64_t rows = c.ring > 0 ? c.ring : c.pos0 + c.T;
    const auto q = random_floats(size_t(c.T * c.H * c.hd), uint32_t(c.T + c.hd), -2.f, 2.f);
    const auto k = random_floats(size_t(rows * kvd), uint32_t(c.T + c.hd + 1), -2.f, 2.f);
    const auto v = random_floats(size_t(rows * kvd), uint32_t(c.T + c.hd + 2));
    const double scale = 1.0 / std::sqrt(24.0);  // Gemma 2's query_pre_attn_scalar != head_dim
    AttentionMask mask;
    mask.window = c.window;
    mask.softcap = c.softcap;
    mask.ring_rows = c.ring;
    const auto want = kernels::ref::attention(q.data(), k.data(), v.data(), c.T, c.pos0, c.H, c.Hkv,
                                              c.hd, scale, mask);
    float* out = poisoned(c.T * c.H * c.hd);
    backend_->attention_masked(dev(q), dev(k), dev(v), out, c.T, c.pos0, c.H, c.Hkv, c.hd,
                               float(scale), mask);
    EXPECT_LT(rel_error(get(out, c.T * c.H * c.hd), want), 5e-6)
        << "T " << c.T << " pos0 " << c.pos0 << " hd " << c.hd << " window " << c.window << " ring "
        << c.ring;
  }
}

TEST_F(CudaTest, StoreKvRingWrapsLikeTheDefault) {
  const int64_t row = 24;
  struct Case {
    int64_t pos, n, ring;
  };
  for (const Case& c : {Case{35, 10, 40}, Case{3, 10, 40}, Case{80, 40, 40}, Case{5, 7, 0}}) {
    const int64_t rows = c.ring > 0 ? c.ring : c.pos + c.n;
    std::vector<float> want(size_t(rows * row), -1.f);
    const auto src = random_floats(size_t(c.n * row), uint32_t(c.pos));
    for (int64_t t = 0; t < c.n; ++t) {
      const int64_t r = c.ring > 0 ? (c.pos + t) % c.ring : c.pos + t;
      std::copy(src.begin() + t * row, src.begin() + (t + 1) * row, want.begin() + r * row);
    }
    float* cache = dev(std::vector<float>(size_t(rows * row), -1.f));
    backend_->store_kv(cache, dev(src), c.pos, row, c.n, c.ring);
    EXPECT_EQ(get(cache, rows * row), want) << c.pos << " " << c.n << " " << c.ring;
    // The CPU's (the Backend default) stores the same rows.
    auto cpu = make_cpu_backend(1);
    std::vector<float> host(size_t(rows * row), -1.f);
    cpu->store_kv(host.data(), src.data(), c.pos, row, c.n, c.ring);
    EXPECT_EQ(host, want);
  }
}

// A decode step of the family ops (per-head norm, partial RoPE, ring store, masked attention,
// scale, soft-cap) captured and replayed while the ring wraps: every step must equal the same
// ops run eagerly (outside a step) on a second set of buffers, and the float64 reference.
TEST_F(CudaTest, CapturedFamilyStepsMatchEagerAcrossRingWrap) {
  const int64_t H = 4, Hkv = 2, hd = 32, n_rot = 16, window = 4, ring = 6, cap = 64;
  const int64_t qd = H * hd, kvd = Hkv * hd;
  const float mscale = 1.2f, scale = 0.2f, softcap = 20.f;
  std::vector<float> inv(size_t(n_rot / 2));
  for (int64_t i = 0; i < n_rot / 2; ++i)
    inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(n_rot)));
  const auto norm_w = random_floats(size_t(hd), 3, 0.5f, 1.5f);
  float* dw = dev(norm_w);
  struct Bufs {
    float *q_in, *k_in, *v, *q, *k, *kc, *vc, *out;
  };
  auto make = [&] {
    return Bufs{poisoned(qd),  poisoned(kvd),        poisoned(kvd),        poisoned(qd),
                poisoned(kvd), poisoned(ring * kvd), poisoned(ring * kvd), poisoned(qd)};
  };
  const Bufs a = make(), b = make();
  AttentionMask mask;
  mask.window = window;
  mask.softcap = softcap;
  mask.ring_rows = ring;
  auto run_ops = [&](const Bufs& s, int32_t pos) {
    backend_->copy(s.q, s.q_in, qd);
    backend_->copy(s.k, s.k_in, kvd);
    backend_->rmsnorm_heads(s.q, dw, H, hd, 1e-6f);
    backend_->rmsnorm_heads(s.k, dw, Hkv, hd, 1e-6f);
    // The named op over a partial rope and a masked ring layer (its plain-ops path).
    const Backend::KvSegment seg{s.kc, DType::F32, s.vc, DType::F32, pos, 1, mask.ring_rows};
    Backend::AttentionBlock blk;
    blk.q = s.q, blk.k = s.k, blk.v = s.v, blk.out = s.out, blk.host_pos = &pos;
    blk.n_tokens = 1, blk.n_heads = H, blk.n_kv_heads = Hkv, blk.head_dim = hd, blk.scale = scale;
    blk.rope = {inv.data(), RopeStyle::kHalves, n_rot, mscale, true};
    blk.window = mask.window, blk.softcap = mask.softcap;
    blk.segments = {&seg, 1};
    backend_->begin_pass(Backend::Phase::kDecode, 1);
    backend_->rope_append_attend(blk);
    backend_->scale(s.out, qd, 3.f);
    backend_->softcap(s.out, qd, 2.f);
  };
  std::vector<float> ref_kc(size_t(ring * kvd)), ref_vc(size_t(ring * kvd));
  for (int32_t pos = 0; pos < 15; ++pos) {
    const auto q = random_floats(size_t(qd), uint32_t(100 + pos));
    const auto k = random_floats(size_t(kvd), uint32_t(200 + pos));
    const auto v = random_floats(size_t(kvd), uint32_t(300 + pos));
    for (const Bufs* s : {&a, &b}) {
      backend_->upload(s->q_in, q.data(), qd);
      backend_->upload(s->k_in, k.data(), kvd);
      backend_->upload(s->v, v.data(), kvd);
    }
    const bool replayed = backend_->begin_decode_step(0, pos, cap);
    if (!replayed) run_ops(a, pos);
    backend_->end_decode_step();
    if (pos >= 2) {
      EXPECT_TRUE(replayed) << "pos " << pos;
    }
    run_ops(b, pos);
    // The reference: norm, rope, ring append, attention, scale, soft-cap in float64.
    auto rq = kernels::ref::rmsnorm(q.data(), norm_w.data(), H, hd, 1e-6);
    auto rk = kernels::ref::rmsnorm(k.data(), norm_w.data(), Hkv, hd, 1e-6);
    rq = kernels::ref::rope_partial(rq.data(), 1, H, hd, n_rot, &pos, inv.data(),
                                    RopeStyle::kHalves, mscale);
    rk = kernels::ref::rope_partial(rk.data(), 1, Hkv, hd, n_rot, &pos, inv.data(),
                                    RopeStyle::kHalves, mscale);
    std::copy(rk.begin(), rk.end(), ref_kc.begin() + (pos % ring) * kvd);
    std::copy(v.begin(), v.end(), ref_vc.begin() + (pos % ring) * kvd);
    auto want = kernels::ref::attention(rq.data(), ref_kc.data(), ref_vc.data(), 1, pos, H, Hkv, hd,
                                        scale, mask);
    for (float& x : want) x = float(2.0 * std::tanh(3.0 * x / 2.0));
    const auto got = get(a.out, qd);
    EXPECT_LT(rel_error(got, get(b.out, qd)), 1e-6) << "pos " << pos;
    EXPECT_LT(rel_error(got, want), 1e-5) << "pos " << pos;
    ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
  }
}

// rope_append_attend with per-head q/k norms (Qwen3): a captured plain decode step (the norms
// inside the attention kernel: the split kernel for f32 rows, the decode kernel for f16 and q8_0
// ones) against the same block run eagerly (rmsnorm_heads launches, rope, store, attention) and
// the float64 reference, with the cache rows the step appended attended to by the steps after it.
class CudaNormsTest : public CudaTest {
 protected:
  void norms_heads_inside_attention(DType type);
};
void CudaNormsTest::norms_heads_inside_attention(DType type) {
  const int64_t H = 4, Hkv = 2, hd = 128, cap = 32;
  const int64_t qd = H * hd, kvd = Hkv * hd;
  const float scale = 0.09f;
  std::vector<float> inv(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i)
    inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(hd)));
  const auto qw = random_floats(size_t(hd), 5, 0.5f, 1.5f);
  const auto kw = random_floats(size_t(hd), 6, 0.5f, 1.5f);
  float *d_qw = dev(qw), *d_kw = dev(kw);
  struct Bufs {
    float *q, *k, *v, *kc, *vc, *out;
  };
  auto make = [&] {
    return Bufs{poisoned(qd),        poisoned(kvd),       poisoned(kvd),
                poisoned(cap * kvd), poisoned(cap * kvd), poisoned(qd)};
  };
  const Bufs a = make(), b = make();
  std::vector<float> ref_kc(size_t(cap * kvd)), ref_vc(size_t(cap * kvd));
  for (int32_t pos = 0; pos < 6; ++pos) {
    const auto q = random_floats(size_t(qd), uint32_t(400 + pos), -2.f, 2.f);
    const auto k = random_floats(size_t(kvd), uint32_t(500 + pos), -2.f, 2.f);
    const auto v = random_floats(size_t(kvd), uint32_t(600 + pos));
    auto run_ops = [&](const Bufs& s) {
      const Backend::KvSegment seg{s.kc, type, s.vc, type, pos, 1, 0};
      Backend::AttentionBlock blk;
      blk.q = s.q, blk.k = s.k, blk.v = s.v, blk.out = s.out, blk.host_pos = &pos;
      blk.n_tokens = 1, blk.n_heads = H, blk.n_kv_heads = Hkv, blk.head_dim = hd;
      blk.scale = scale;
      blk.rope = {inv.data(), RopeStyle::kHalves, hd, 1.f, false};
      blk.q_norm = d_qw, blk.k_norm = d_kw, blk.norm_eps = 1e-6f;
      blk.segments = {&seg, 1};
      backend_->begin_pass(Backend::Phase::kDecode, 1);
      backend_->rope_append_attend(blk);
    };
    for (const Bufs* s : {&a, &b}) {
      backend_->upload(s->q, q.data(), qd);
      backend_->upload(s->k, k.data(), kvd);
      backend_->upload(s->v, v.data(), kvd);
    }
    const bool replayed = backend_->begin_decode_step(0, pos, cap);
    if (!replayed) run_ops(a);
    backend_->end_decode_step();
    if (pos >= 2) {
      EXPECT_TRUE(replayed) << "pos " << pos;
    }
    run_ops(b);
    auto rq = kernels::ref::rmsnorm(q.data(), qw.data(), H, hd, 1e-6);
    auto rk = kernels::ref::rmsnorm(k.data(), kw.data(), Hkv, hd, 1e-6);
    rq = kernels::ref::rope_partial(rq.data(), 1, H, hd, hd, &pos, inv.data(), RopeStyle::kHalves,
                                    1.f);
    rk = kernels::ref::rope_partial(rk.data(), 1, Hkv, hd, hd, &pos, inv.data(), RopeStyle::kHalves,
                                    1.f);
    std::copy(rk.begin(), rk.end(), ref_kc.begin() + pos * kvd);
    std::copy(v.begin(), v.end(), ref_vc.begin() + pos * kvd);
    const auto want = kernels::ref::attention(rq.data(), ref_kc.data(), ref_vc.data(), 1, pos, H,
                                              Hkv, hd, scale, AttentionMask{});
    const auto got = get(a.out, qd);
    const bool f32 = type == DType::F32;
    // Typed rows: the reference attends to unrounded k / v, so only a sanity bound (q8_0's
    // per-block rounding of normed rows: 3.6e-3 to 7e-3 seen); the eager comparison and the
    // appended bytes pin the fused step.
    const double tol = f32 ? 1e-5 : type == DType::Q8_0 ? 2e-2 : 2e-3;
    EXPECT_LT(rel_error(got, get(b.out, qd)), f32 ? 1e-6 : 1e-5)
        << dtype_name(type) << " pos " << pos;
    EXPECT_LT(rel_error(got, want), tol) << dtype_name(type) << " pos " << pos;
    if (f32) {
      const auto row = get(a.kc + pos * kvd, kvd);  // the appended row: normed and rotated
      EXPECT_LT(rel_error(row, rk), 1e-5) << "pos " << pos;
    } else {  // the appended rows' bytes: the fused step's store against the eager one's
      const auto row_a = get(a.kc, cap * kvd), row_b = get(b.kc, cap * kvd);
      const auto bytes = int64_t(*row_bytes(type, uint64_t(kvd)));
      EXPECT_EQ(
          std::memcmp(reinterpret_cast<const char*>(row_a.data()) + pos * bytes,
                      reinterpret_cast<const char*>(row_b.data()) + pos * bytes, size_t(bytes)),
          0)
          << dtype_name(type) << " pos " << pos;
    }
    ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
  }
}

TEST_F(CudaNormsTest, CapturedStepNormsHeadsInsideAttention) {
  norms_heads_inside_attention(DType::F32);
}
TEST_F(CudaNormsTest, CapturedStepNormsHeadsInsideAttentionF16Cache) {
  norms_heads_inside_attention(DType::F16);
}
TEST_F(CudaNormsTest, CapturedStepNormsHeadsInsideAttentionQ8Cache) {
  norms_heads_inside_attention(DType::Q8_0);
}

}  // namespace
}  // namespace hearth::test
