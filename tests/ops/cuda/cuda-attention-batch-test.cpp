// A decode step of many sequences (Phase::kDecodeBatch, rope_append_attend_batch): every
// segment's RoPE, K/V append and attention (attention-batch.cu) against the CPU backend, which
// takes the segments one by one, through the backend's op and through each kernel. Positions
// straddle the 64-position split chunks and differ per segment, GQA 4:1 and MHA, both rope
// styles, head sizes 32-256, and every cache element type. The fp16 copy of the output (the O
// projection's x in a decode step) against the batched matmul's own conversion of that output;
// each kernel against attention computed in double. A sliding, soft-capped, sink, YaRN layer's
// step on the decode kernels. The decode kernels and the merged warp form also with the RoPE and
// K/V append fused into them (the backend's op wherever they run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "cuda-test-util.h"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/decode-batch.h"

namespace hearth::test {
namespace {

// The batch kernels' per-segment descriptors on the device, and the longest context among them.
struct DeviceSegments {
  void* p = nullptr;
  int64_t max_ctx = 0;
  explicit DeviceSegments(const std::vector<cuda::AttnSegment>& segs) {
    for (const auto& sg : segs) max_ctx = std::max<int64_t>(max_ctx, sg.pos + 1);
    EXPECT_EQ(cudaMalloc(&p, segs.size() * sizeof(cuda::AttnSegment)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, segs.data(), segs.size() * sizeof(segs[0]), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  // Sequence i: caches kc[i] / vc[i], this token at positions[i].
  DeviceSegments(const std::vector<float*>& kc, const std::vector<float*>& vc,
                 const std::vector<int64_t>& positions)
      : DeviceSegments([&] {
          std::vector<cuda::AttnSegment> segs;
          for (size_t i = 0; i < positions.size(); ++i)
            segs.push_back({kc[i], vc[i], int32_t(positions[i])});
          return segs;
        }()) {}
  ~DeviceSegments() { cudaFree(p); }
  const cuda::AttnSegment* get() const { return static_cast<const cuda::AttnSegment*>(p); }
};

TEST_F(CudaTest, DecodeBatchAttentionMatchesSegmentBySegment) {
  // Through the backend's op (the kernel it picks; on the decode kernels with the RoPE and
  // append inside), then launch_rope_kv_batch and each kernel launched directly (the decode
  // kernels; the chunked kernel's warp form over 64-position chunks and over one chunk, and its
  // block form), and last the decode kernels and the merged warp form with the RoPE and append
  // fused (launch_attention_batch's rope), each from the same caches.
  auto cpu = make_cpu_backend(1);
  const std::vector<int64_t> positions = {0, 1, 63, 64, 200, 17};
  const int64_t B = int64_t(positions.size()), heads = 8, cap = 256;
  const std::pair<cuda::BatchAttnKernel, int> direct[] = {
      {cuda::BatchAttnKernel::kDecode, 0},
      {cuda::BatchAttnKernel::kChunked, 64},
      {cuda::BatchAttnKernel::kChunked, 256},
      {cuda::BatchAttnKernel::kChunkedBlocks, 0},
      {cuda::BatchAttnKernel::kMerged, 0}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t hd : {64, 128, 256})
      for (int64_t kv_heads : {2, 8})
        for (kernels::RopeStyle style :
             {kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves}) {
          const int64_t kvd = kv_heads * hd;
          const auto q = random_floats(size_t(B * heads * hd), uint32_t(hd), -3.f, 3.f);
          const auto k = random_floats(size_t(B * kvd), uint32_t(hd + 1), -3.f, 3.f);
          const auto v = random_floats(size_t(B * kvd), uint32_t(hd + 2), -3.f, 3.f);
          std::vector<float> inv(size_t(hd / 2));
          for (int64_t i = 0; i < hd / 2; ++i)
            inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
          std::vector<int32_t> pos(positions.begin(), positions.end());
          // Each cache as rows of type t (held in floats, as Backend moves them).
          const int64_t row_floats = (kernels::kv_row_bytes(t, kvd) * cap + 3) / 4;
          auto typed = [&](uint32_t seed) {
            const auto values = random_floats(size_t(cap * kvd), seed, -1.f, 1.f);
            std::vector<float> rows(size_t(row_floats), 0.f);
            kernels::store_kv_rows(t, values.data(), rows.data(), cap, kvd);
            return rows;
          };
          std::vector<std::vector<float>> kc0, vc0;
          for (int64_t i = 0; i < B; ++i) {
            kc0.push_back(typed(uint32_t(10 + i)));
            vc0.push_back(typed(uint32_t(20 + i)));
          }
          // The CPU's segment-by-segment result, its caches appended in place.
          std::vector<std::vector<float>> kc = kc0, vc = vc0;
          std::vector<Backend::KvSegment> csegs;
          for (int64_t i = 0; i < B; ++i)
            csegs.push_back(
                {kc[size_t(i)].data(), t, vc[size_t(i)].data(), t, positions[size_t(i)], 1, 0});
          Backend::AttentionBlock c;
          auto q_host = q, k_host = k;
          std::vector<float> want(size_t(B * heads * hd));
          c.q = q_host.data(), c.k = k_host.data(), c.v = v.data(), c.out = want.data();
          c.host_pos = pos.data();
          c.n_tokens = B, c.n_heads = heads, c.n_kv_heads = kv_heads, c.head_dim = hd;
          c.scale = 1.f / std::sqrt(float(hd));
          c.rope = {inv.data(), style, hd, 1.f, false};
          c.segments = csegs;
          cpu->rope_append_attend(c);

          const int style_code = style == kernels::RopeStyle::kInterleaved ? 0 : 1;
          // The fused variants: the decode kernels, then the merged warp form, where each takes
          // the rotation and append.
          cuda::AttnRope shape;  // (style and norms: what attention_batch_takes_rope looks at)
          shape.style = style_code;
          const cuda::BatchAttnKernel fused_kernels[] = {cuda::BatchAttnKernel::kDecode,
                                                         cuda::BatchAttnKernel::kMerged};
          for (size_t variant = 0; variant <= std::size(direct) + 2; ++variant) {
            const bool fused = variant > std::size(direct);
            const cuda::BatchAttnKernel fused_kernel =
                fused_kernels[fused ? variant - std::size(direct) - 1 : 0];
            if (fused && !cuda::attention_batch_takes_rope(B, heads, kv_heads, hd, t, int64_t(cap),
                                                           false, shape, fused_kernel))
              continue;
            std::string what = std::string(dtype_name(t)) + " hd " + std::to_string(hd) +
                               " kv heads " + std::to_string(kv_heads) + " style " +
                               std::to_string(style_code) + " ";
            what += variant == 0 ? "backend op"
                    : fused      ? "kernel " + std::to_string(int(fused_kernel)) + ", rope fused"
                                 : "kernel " + std::to_string(int(direct[variant - 1].first)) +
                                  " chunk " + std::to_string(direct[variant - 1].second);
            std::vector<float*> gkc, gvc;
            for (int64_t i = 0; i < B; ++i) {
              gkc.push_back(dev(kc0[size_t(i)]));
              gvc.push_back(dev(vc0[size_t(i)]));
            }
            float* out = poisoned(B * heads * hd);
            if (variant == 0) {
              std::vector<Backend::KvSegment> gsegs;
              for (int64_t i = 0; i < B; ++i)
                gsegs.push_back({gkc[size_t(i)], t, gvc[size_t(i)], t, positions[size_t(i)], 1, 0});
              Backend::AttentionBlock a = c;
              a.q = dev(q), a.k = dev(k), a.v = dev(v), a.out = out;
              a.segments = gsegs;
              backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
              backend_->rope_append_attend_batch(a);
              ASSERT_TRUE(backend_->status().ok()) << what;
            } else {
              const DeviceSegments ds(gkc, gvc, positions);
              const int64_t max_ctx = ds.max_ctx;
              std::vector<float> parts(
                  size_t(cuda::attention_batch_partials_floats(B, heads, hd, max_ctx)), 0.f);
              float* partials = dev(parts);
              float *gq = dev(q), *gk = dev(k), *gv = dev(v), *freq = dev(inv);
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // (uploads: the backend's stream)
              const cuda::AttnSegment* dsegs = ds.get();
              if (fused) {
                cuda::AttnRope rope;
                rope.k = gk, rope.v = gv, rope.inv_freq = freq, rope.style = style_code;
                ASSERT_EQ(cuda::launch_attention_batch(gq, out, dsegs, B, max_ctx, heads, kv_heads,
                                                       hd, t, c.scale, partials, nullptr, nullptr,
                                                       fused_kernel, 0, {}, rope),
                          cudaSuccess)
                    << what;
              } else {
                ASSERT_EQ(cuda::launch_rope_kv_batch(gq, heads, gk, kv_heads, gv, hd, dsegs, B, t,
                                                     freq, style_code, nullptr),
                          cudaSuccess)
                    << what;
                ASSERT_EQ(cuda::launch_attention_batch(gq, out, dsegs, B, max_ctx, heads, kv_heads,
                                                       hd, t, c.scale, partials, nullptr, nullptr,
                                                       direct[variant - 1].first,
                                                       direct[variant - 1].second),
                          cudaSuccess)
                    << what;
              }
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
            }
            // The GPU's rotated k may differ from the CPU's in the last f32 bit, which can move
            // a stored element by one step of the type (and a q8_0 block's scale with it).
            const double row_tol = t == DType::F32 ? 1e-6 : t == DType::F16 ? 1e-3 : 1e-2;
            for (int64_t i = 0; i < B; ++i) {
              EXPECT_LT(rel_error(widen_kv_rows(t, get(gkc[size_t(i)], row_floats), cap, kvd),
                                  widen_kv_rows(t, kc[size_t(i)], cap, kvd)),
                        row_tol)
                  << what << " k " << i;
              // v is stored as given: the same bytes (compared as bytes: typed rows read as
              // floats may hold NaN patterns).
              const std::vector<float> got_v = get(gvc[size_t(i)], row_floats);
              EXPECT_EQ(
                  std::memcmp(got_v.data(), vc[size_t(i)].data(), got_v.size() * sizeof(float)), 0)
                  << what << " v " << i;
            }
            EXPECT_LT(rel_error(get(out, B * heads * hd), want), t == DType::F32 ? 1e-4 : 2e-3)
                << what;
          }
        }
}

// A sliding layer's step (a window of 64 over rings of 72 rows, most of them wrapped; sinks; a
// soft-cap; YaRN's scaled rotation) through the backend's batch op and through the kernels
// launched directly, against the CPU's segment-by-segment plain ops. The chunked kernel refuses
// the mask.
TEST_F(CudaTest, MaskedDecodeBatchMatchesSegmentBySegment) {
  auto cpu = make_cpu_backend(1);
  const std::vector<int64_t> positions = {0, 5, 70, 300, 1000, 41, 143};
  const int64_t B = int64_t(positions.size()), heads = 8, window = 64, ring = 72;
  const float softcap = 20.f, mscale = 1.25f;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0})
    for (int64_t hd : {64, 128, 256})
      for (int64_t kv_heads : {2, 8}) {
        const int64_t kvd = kv_heads * hd,
                      row_floats = (kernels::kv_row_bytes(t, kvd) * ring + 3) / 4;
        const auto q = random_floats(size_t(B * heads * hd), uint32_t(hd), -3.f, 3.f);
        const auto k = random_floats(size_t(B * kvd), uint32_t(hd + 1), -3.f, 3.f);
        const auto v = random_floats(size_t(B * kvd), uint32_t(hd + 2), -3.f, 3.f);
        const auto sink_logits = random_floats(size_t(heads), 9, -1.f, 4.f);
        std::vector<float> inv(size_t(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i)
          inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
        std::vector<int32_t> pos(positions.begin(), positions.end());
        std::vector<std::vector<float>> kc0, vc0;
        for (int64_t i = 0; i < B; ++i)
          for (auto* caches : {&kc0, &vc0}) {
            const auto values =
                random_floats(size_t(ring * kvd), uint32_t(30 + i + caches->size()), -1.f, 1.f);
            std::vector<float> rows(size_t(row_floats), 0.f);
            kernels::store_kv_rows(t, values.data(), rows.data(), ring, kvd);
            caches->push_back(rows);
          }
        std::vector<std::vector<float>> kc = kc0, vc = vc0;
        std::vector<Backend::KvSegment> csegs;
        for (int64_t i = 0; i < B; ++i)
          csegs.push_back(
              {kc[size_t(i)].data(), t, vc[size_t(i)].data(), t, positions[size_t(i)], 1, ring});
        Backend::AttentionBlock c;
        auto q_host = q, k_host = k;
        std::vector<float> want(size_t(B * heads * hd));
        c.q = q_host.data(), c.k = k_host.data(), c.v = v.data(), c.out = want.data();
        c.host_pos = pos.data();
        c.n_tokens = B, c.n_heads = heads, c.n_kv_heads = kv_heads, c.head_dim = hd;
        c.scale = 1.f / std::sqrt(float(hd));
        c.rope = {inv.data(), kernels::RopeStyle::kHalves, hd, mscale, true};
        c.window = window, c.softcap = softcap, c.sinks = sink_logits.data();
        c.segments = csegs;
        cpu->rope_append_attend(c);
        const float* dsinks = dev(sink_logits);
        for (int variant = 0; variant < 2; ++variant) {
          const std::string what = std::string(dtype_name(t)) + " hd " + std::to_string(hd) +
                                   " kv heads " + std::to_string(kv_heads) +
                                   (variant == 0 ? " backend op" : " kernels");
          std::vector<float*> gkc, gvc;
          for (int64_t i = 0; i < B; ++i)
            gkc.push_back(dev(kc0[size_t(i)])), gvc.push_back(dev(vc0[size_t(i)]));
          float* out = poisoned(B * heads * hd);
          if (variant == 0) {
            std::vector<Backend::KvSegment> gsegs;
            for (int64_t i = 0; i < B; ++i)
              gsegs.push_back(
                  {gkc[size_t(i)], t, gvc[size_t(i)], t, positions[size_t(i)], 1, ring});
            Backend::AttentionBlock a = c;
            a.q = dev(q), a.k = dev(k), a.v = dev(v), a.out = out, a.sinks = dsinks;
            a.segments = gsegs;
            backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
            backend_->rope_append_attend_batch(a);
            ASSERT_TRUE(backend_->status().ok()) << what << ": " << backend_->status().message();
          } else {
            const DeviceSegments ds(gkc, gvc, positions);
            const int64_t max_ctx = ds.max_ctx;
            float* partials = dev(std::vector<float>(
                size_t(cuda::attention_batch_partials_floats(B, heads, hd, max_ctx)), 0.f));
            float *gq = dev(q), *gk = dev(k), *gv = dev(v), *freq = dev(inv);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const cuda::AttnSegment* dsegs = ds.get();
            ASSERT_EQ(cuda::launch_rope_kv_batch(gq, heads, gk, kv_heads, gv, hd, dsegs, B, t, freq,
                                                 1, nullptr, int(ring), mscale),
                      cudaSuccess)
                << what;
            const cuda::AttnKv mask{t, t, dsinks, int(window), int(ring), softcap};
            EXPECT_EQ(cuda::launch_attention_batch(gq, out, dsegs, B, max_ctx, heads, kv_heads, hd,
                                                   t, c.scale, partials, nullptr, nullptr,
                                                   cuda::BatchAttnKernel::kChunked, 0, mask),
                      cudaErrorInvalidValue)
                << what;
            ASSERT_EQ(cuda::launch_attention_batch(gq, out, dsegs, B, max_ctx, heads, kv_heads, hd,
                                                   t, c.scale, partials, nullptr, nullptr,
                                                   cuda::BatchAttnKernel::kChosen, 0, mask),
                      cudaSuccess)
                << what;
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          }
          const double row_tol = t == DType::F16 ? 1e-3 : 1e-2;
          for (int64_t i = 0; i < B; ++i)
            EXPECT_LT(rel_error(widen_kv_rows(t, get(gkc[size_t(i)], row_floats), ring, kvd),
                                widen_kv_rows(t, kc[size_t(i)], ring, kvd)),
                      row_tol)
                << what << " k " << i;
          EXPECT_LT(rel_error(get(out, B * heads * hd), want), 2e-3) << what;
        }
      }
}

TEST_F(CudaTest, DecodeBatchAttentionWritesTheFp16FormOfItsOutput) {
  // 20 segments (more than the fp16 form's 17), positions across the split chunks, GQA 4:1; the
  // decode kernels, the chunked kernel over 64-position chunks (a combine launch writes the
  // output) and over one chunk (its warps write it), each against launch_batch_x_half's
  // conversion of its own output, and against each other.
  const int64_t B = 20, heads = 8, kv_heads = 2, hd = 128, cap = 192, kvd = kv_heads * hd;
  const int64_t width = heads * hd;
  std::vector<cuda::AttnSegment> segs;
  const int64_t row_floats = (kernels::kv_row_bytes(DType::F16, kvd) * cap + 3) / 4;
  for (int64_t i = 0; i < B; ++i) {
    std::vector<float> rows(static_cast<size_t>(row_floats));
    const auto values = random_floats(size_t(cap * kvd), uint32_t(40 + i));
    kernels::store_kv_rows(DType::F16, values.data(), rows.data(), cap, kvd);
    segs.push_back({dev(rows), dev(rows), int32_t((i * 37) % cap)});
  }
  const DeviceSegments ds(segs);
  const int64_t max_ctx = ds.max_ctx;
  float* q = dev(random_floats(size_t(B * width), 7, -2.f, 2.f));
  const int64_t n_parts = cuda::attention_batch_partials_floats(B, heads, hd, max_ctx);
  const size_t xh_bytes = cuda::batch_x_half_bytes(B, width);
  std::vector<float> outs[3];
  for (int k = 0; k < 3; ++k) {
    const auto kernel = k == 0 ? cuda::BatchAttnKernel::kDecode : cuda::BatchAttnKernel::kChunked;
    const int warp_chunk = k == 1 ? 64 : k == 2 ? 256 : 0;
    float* out = poisoned(B * width);
    // NaN partials but zero counters (uploaded in one piece: the backend's stream).
    std::vector<float> parts(static_cast<size_t>(n_parts), std::numeric_limits<float>::quiet_NaN());
    std::fill_n(parts.begin(), cuda::attention_counter_slots(B, heads), 0.f);
    float* partials = dev(parts);
    // (the uploads go through the backend's stream; the launches below use the default one)
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    void *fused = nullptr, *converted = nullptr;
    ASSERT_EQ(cudaMalloc(&fused, xh_bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&converted, xh_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(fused, 0, xh_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(converted, 0, xh_bytes), cudaSuccess);
    // Twice: the first launch must leave the counters as it found them.
    for (int rep = 0; rep < 2; ++rep)
      ASSERT_EQ(cuda::launch_attention_batch(q, out, ds.get(), B, max_ctx, heads, kv_heads, hd,
                                             DType::F16, 1.f / std::sqrt(float(hd)), partials,
                                             nullptr, fused, kernel, warp_chunk),
                cudaSuccess);
    ASSERT_EQ(cuda::launch_batch_x_half(out, B, width, converted, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const size_t used = size_t(B * width) * 2;  // (rows past B are padding nobody reads)
    std::vector<uint8_t> a(used), b(used);
    ASSERT_EQ(cudaMemcpy(a.data(), fused, used, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.data(), converted, used, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(a, b) << "kernel " << k;
    outs[k] = get(out, B * width);
    EXPECT_TRUE(std::none_of(outs[k].begin(), outs[k].end(), [](float x) { return std::isnan(x); }))
        << "kernel " << k;
    for (void* p : {fused, converted}) cudaFree(p);
  }
  // The decode kernel's products are fp32-accurate (q and the weights as fp16 hi + lo pairs).
  EXPECT_LT(rel_error(outs[0], outs[1]), 1e-5);
  EXPECT_LT(rel_error(outs[2], outs[1]), 1e-5);
}

TEST_F(CudaTest, DecodeBatchAttentionKernelsMatchAReference) {
  // Every kernel a step can take (the decode kernels where they apply, the chunked kernel a warp
  // a chunk and a block a chunk) over the same caches, against attention computed in double from
  // the widened rows: f32, f16 and bf16 rows, head sizes 32-256, MHA and GQA, positions on both
  // sides of the 64-position chunks and of a warp's 16-row rounds.
  const std::vector<int32_t> positions = {0, 1, 15, 16, 63, 64, 65, 130, 200, 37, 191};
  const int64_t B = int64_t(positions.size()), heads = 8, cap = 224;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t hd : {32, 64, 128, 256})
      for (int64_t kv_heads : {8, 2}) {
        const int64_t kvd = kv_heads * hd, width = heads * hd;
        const int64_t row_floats = (kernels::kv_row_bytes(t, kvd) * cap + 3) / 4;
        std::vector<std::vector<float>> kw, vw;  // the rows as the kernels read them, widened
        std::vector<cuda::AttnSegment> segs;
        for (int64_t i = 0; i < B; ++i) {
          std::vector<float> kr(static_cast<size_t>(row_floats)), vr(kr.size());
          const auto kvals = random_floats(size_t(cap * kvd), uint32_t(100 + i), -2.f, 2.f);
          const auto vvals = random_floats(size_t(cap * kvd), uint32_t(200 + i));
          kernels::store_kv_rows(t, kvals.data(), kr.data(), cap, kvd);
          kernels::store_kv_rows(t, vvals.data(), vr.data(), cap, kvd);
          kw.push_back(widen_kv_rows(t, kr, cap, kvd));
          vw.push_back(widen_kv_rows(t, vr, cap, kvd));
          segs.push_back({dev(kr), dev(vr), positions[size_t(i)]});
        }
        const auto q = random_floats(size_t(B * width), uint32_t(hd), -1.f, 1.f);
        const float scale = 1.f / std::sqrt(float(hd));
        std::vector<float> want(static_cast<size_t>(B * width));
        for (int64_t i = 0; i < B; ++i)
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t kvh = h / (heads / kv_heads), n = positions[size_t(i)] + 1;
            const float* qr = &q[size_t((i * heads + h) * hd)];
            std::vector<double> sc(static_cast<size_t>(n));
            double mx = -1e300, sum = 0;
            for (int64_t p = 0; p < n; ++p) {
              double d = 0;
              for (int64_t e = 0; e < hd; ++e)
                d += double(qr[e]) * kw[size_t(i)][size_t(p * kvd + kvh * hd + e)];
              sc[size_t(p)] = d * scale;
              mx = std::max(mx, sc[size_t(p)]);
            }
            for (double& x : sc) sum += (x = std::exp(x - mx));
            for (int64_t e = 0; e < hd; ++e) {
              double a = 0;
              for (int64_t p = 0; p < n; ++p)
                a += sc[size_t(p)] * vw[size_t(i)][size_t(p * kvd + kvh * hd + e)];
              want[size_t((i * heads + h) * hd + e)] = float(a / sum);
            }
          }
        const DeviceSegments ds(segs);
        const int64_t max_ctx = ds.max_ctx;
        const int64_t n_parts = cuda::attention_batch_partials_floats(B, heads, hd, max_ctx);
        // (uploaded before the synchronize below: the backend's stream does not order itself
        // with the default stream the launches use, and a small upload returns before it lands)
        float* dq = dev(q);
        // (the warp form over 64-position chunks, and over one chunk of 256: no combine)
        const std::pair<cuda::BatchAttnKernel, int> kernels[] = {
            {cuda::BatchAttnKernel::kDecode, 0},
            {cuda::BatchAttnKernel::kChunked, 64},
            {cuda::BatchAttnKernel::kChunked, 256},
            {cuda::BatchAttnKernel::kChunkedBlocks, 0},
            {cuda::BatchAttnKernel::kMerged, 0}};
        for (const auto& [kernel, warp_chunk] : kernels) {
          std::vector<float> parts(static_cast<size_t>(n_parts), 0.f);
          float* partials = dev(parts);
          float* out = poisoned(B * width);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // (uploads on the backend's stream)
          ASSERT_EQ(
              cuda::launch_attention_batch(dq, out, ds.get(), B, max_ctx, heads, kv_heads, hd, t,
                                           scale, partials, nullptr, nullptr, kernel, warp_chunk),
              cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_LT(rel_error(get(out, B * width), want), 1e-5)
              << dtype_name(t) << " hd " << hd << " kv heads " << kv_heads << " kernel "
              << int(kernel) << " chunk " << warp_chunk;
        }
      }
}

}  // namespace
}  // namespace hearth::test
