// hearth_embed against the engine it wraps: mean-pooled, L2-normalised final hidden states from
// Model::forward_hidden computed here independently (the test links the runtime directly).
#include <cmath>

#include "api-test-util.h"
#include "runtime/engine.h"

namespace hearth::test {
namespace {

std::vector<float> api_embed(const std::vector<int32_t>& ids) {
  std::vector<float> e(96);
  size_t n = 0;
  EXPECT_EQ(hearth_embed(tiny_model(), ids.data(), ids.size(), e.data(), e.size(), &n), HEARTH_OK)
      << hearth_last_error();
  e.resize(n);
  return e;
}

TEST(ApiEmbed, MeanPooledNormalisedHiddenStates) {
  const Golden& g = tiny_golden();
  auto engine = Engine::load(tiny_gguf(), {});
  ASSERT_TRUE(engine.is_ok()) << engine.message();
  const Model& m = engine.value()->model();
  const int64_t dim = m.hparams().n_embd;
  auto kv = m.new_kv_cache(64);
  ASSERT_TRUE(kv.is_ok());
  ForwardScratch scratch;
  std::vector<float> hidden;
  const std::vector<BatchSegment> segs = {{&kv.value(), 0, int64_t(g.input_ids.size()), true}};
  ASSERT_TRUE(m.forward_hidden(g.input_ids, segs, scratch, &hidden).is_ok());
  ASSERT_EQ(hidden.size(), g.input_ids.size() * size_t(dim));
  std::vector<double> want(size_t(dim), 0.0);
  for (size_t t = 0; t < g.input_ids.size(); ++t)
    for (int64_t i = 0; i < dim; ++i) want[size_t(i)] += hidden[t * size_t(dim) + size_t(i)];
  double norm = 0;
  for (double v : want) norm += v * v;
  norm = std::sqrt(norm);

  const std::vector<float> got = api_embed(g.input_ids);
  ASSERT_EQ(int64_t(got.size()), dim);
  double got_norm = 0;
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_NEAR(got[size_t(i)], want[size_t(i)] / norm, 1e-5) << "dim " << i;
    got_norm += double(got[size_t(i)]) * got[size_t(i)];
  }
  EXPECT_NEAR(got_norm, 1.0, 1e-5);
  // Deterministic, and a different text gives a different vector.
  EXPECT_EQ(api_embed(g.input_ids), got);
  const std::vector<float> other = api_embed(g.gen_prompt);
  double dot = 0;
  for (int64_t i = 0; i < dim; ++i) dot += double(got[size_t(i)]) * other[size_t(i)];
  EXPECT_LT(dot, 0.9999);
}

}  // namespace
}  // namespace hearth::test
