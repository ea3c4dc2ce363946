// Decode-step capture: a small embed -> matmul -> rope -> store_kv -> attention step run through
// begin/end_decode_step (warm-up, capture, then replays with new token and position) must give
// what the same ops give eagerly on a second set of buffers, step after step.
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

struct StepBuffers {
  float *x, *q, *kc, *vc, *out;
};

TEST_F(CudaTest, CapturedDecodeStepsMatchEager) {
  const int64_t vocab = 50, dim = 64, heads = 2, hd = 32, cap = 16;
  auto table_bytes = random_weight_bytes(DType::Q8_0, vocab, dim, 1);
  auto wq_bytes = random_weight_bytes(DType::F16, dim, dim, 2);
  Weight table, wq;
  table.host = TensorView{"tok", DType::Q8_0, {vocab, dim}, table_bytes.data(), table_bytes.size()};
  wq.host = TensorView{"wq", DType::F16, {dim, dim}, wq_bytes.data(), wq_bytes.size()};
  ASSERT_TRUE(backend_->prepare_weight(table).is_ok());
  ASSERT_TRUE(backend_->prepare_weight(wq).is_ok());
  std::vector<float> inv(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
  auto make = [&] {
    return StepBuffers{poisoned(dim), poisoned(dim), poisoned(cap * dim), poisoned(cap * dim),
                       poisoned(dim)};
  };
  StepBuffers a = make(), b = make();
  auto run_ops = [&](const StepBuffers& s, int32_t token, int32_t pos) {
    backend_->embed(table, &token, 1, s.x);
    backend_->matmul(wq, s.x, 1, s.q);
    backend_->rope(s.q, 1, heads, hd, &pos, inv.data(), kernels::RopeStyle::kHalves);
    backend_->store_kv(s.kc, s.q, pos, dim, 1);
    backend_->store_kv(s.vc, s.x, pos, dim, 1);
    backend_->attention(s.q, s.kc, s.vc, s.out, 1, pos, heads, heads, hd,
                        1.f / std::sqrt(float(hd)));
  };
  for (int32_t pos = 0; pos < 9; ++pos) {
    const int32_t token = (pos * 17 + 3) % int32_t(vocab);
    const bool replayed = backend_->begin_decode_step(token, pos, cap);
    if (!replayed) run_ops(a, token, pos);
    backend_->end_decode_step();
    // Step 0 warms up, step 1 captures; every later step must be a replay.
    if (options().graphs && pos >= 2) {
      EXPECT_TRUE(replayed) << "pos " << pos;
    }
    run_ops(b, token, pos);
    const auto got = get(a.out, dim), want = get(b.out, dim);
    EXPECT_LT(rel_error(got, want), 1e-6) << "pos " << pos;
    ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
  }
}

}  // namespace
}  // namespace hearth::test
