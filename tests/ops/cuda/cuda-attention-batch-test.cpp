// A decode step of many sequences (Phase::kDecodeBatch, rope_append_attend_batch): every
// segment's RoPE, K/V append and attention in one launch each (attention-batch.cu) against the
// CPU backend, which takes the segments one by one. Positions straddle the 64-position split
// chunks and differ per segment, GQA 4:1, both rope styles, head sizes 64 and 128.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda-test-util.h"

namespace hearth::test {
namespace {

TEST_F(CudaTest, DecodeBatchAttentionMatchesSegmentBySegment) {
  auto cpu = make_cpu_backend(1);
  const std::vector<int64_t> positions = {0, 1, 63, 64, 200, 17};
  const int64_t B = int64_t(positions.size()), heads = 8, kv_heads = 2, cap = 256;
  for (int64_t hd : {64, 128})
    for (kernels::RopeStyle style :
         {kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves}) {
      const int64_t kvd = kv_heads * hd;
      auto q = random_floats(size_t(B * heads * hd), uint32_t(hd), -3.f, 3.f);
      auto k = random_floats(size_t(B * kvd), uint32_t(hd + 1), -3.f, 3.f);
      const auto v = random_floats(size_t(B * kvd), uint32_t(hd + 2), -3.f, 3.f);
      std::vector<float> inv(size_t(hd / 2));
      for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
      std::vector<int32_t> pos(positions.begin(), positions.end());
      std::vector<std::vector<float>> kc, vc;
      std::vector<float*> gkc, gvc;
      std::vector<Backend::KvSegment> gsegs, csegs;
      for (int64_t i = 0; i < B; ++i) {
        kc.push_back(random_floats(size_t(cap * kvd), uint32_t(10 + i), -1.f, 1.f));
        vc.push_back(random_floats(size_t(cap * kvd), uint32_t(20 + i), -1.f, 1.f));
        gkc.push_back(dev(kc.back()));
        gvc.push_back(dev(vc.back()));
      }
      for (int64_t i = 0; i < B; ++i) {
        gsegs.push_back(
            {gkc[size_t(i)], DType::F32, gvc[size_t(i)], DType::F32, positions[size_t(i)], 1, 0});
        csegs.push_back({kc[size_t(i)].data(), DType::F32, vc[size_t(i)].data(), DType::F32,
                         positions[size_t(i)], 1, 0});
      }
      Backend::AttentionBlock a;
      a.q = dev(q), a.k = dev(k), a.v = dev(v), a.out = poisoned(B * heads * hd);
      a.host_pos = pos.data();
      a.n_tokens = B, a.n_heads = heads, a.n_kv_heads = kv_heads, a.head_dim = hd;
      a.scale = 1.f / std::sqrt(float(hd));
      a.rope = {inv.data(), style, hd, 1.f, false};
      a.segments = gsegs;
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      backend_->rope_append_attend_batch(a);

      std::vector<float> out(size_t(B * heads * hd));
      Backend::AttentionBlock c = a;
      c.q = q.data(), c.k = k.data(), c.v = v.data(), c.out = out.data();
      c.segments = csegs;
      cpu->rope_append_attend(c);
      const std::string what = "hd " + std::to_string(hd) + " style " + std::to_string(int(style));
      for (int64_t i = 0; i < B; ++i) {
        EXPECT_LT(rel_error(get(gkc[size_t(i)], cap * kvd), kc[size_t(i)]), 1e-6)
            << what << " k " << i;
        EXPECT_EQ(get(gvc[size_t(i)], cap * kvd), vc[size_t(i)]) << what << " v " << i;
      }
      EXPECT_LT(rel_error(get(a.out, B * heads * hd), out), 1e-4) << what;
    }
}

}  // namespace
}  // namespace hearth::test
