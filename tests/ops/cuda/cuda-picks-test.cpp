// Chained decoding on CUDA: the device's greedy pick against greedy_argmax (ties, NaN, +-inf,
// large and odd vocabularies, several picks outstanding; a batch of rows at once), and
// Model::decode_greedy's (and decode_chained's sampled) chained steps against decode + a host pick
// on a small random model with every layer on the GPU. The sampled pick's distribution:
// cuda-sample-test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "cuda-test-util.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "support/greedy-reference.h"
#include "support/test-data.h"
#include "synthetic-model.h"

namespace hearth::test {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

int32_t device_pick(Backend& b, float* logits, int64_t n, int64_t pos) {
  b.pick(logits, n, pos);
  auto t = b.picked_token(pos);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? t.value() : -1;
}

TEST_F(CudaTest, GreedyPickMatchesHostArgmax) {
  struct Case {
    const char* what;
    std::vector<float> v;
  };
  std::vector<Case> cases;
  for (int64_t n : {1, 3, 4, 5, 1023, 1024, 1025, 32000, 128256, 151939})
    cases.push_back({"random", random_floats(size_t(n), uint32_t(n), -8.f, 8.f)});
  {
    // Equal maxima spread over threads, warps and the scalar tail: the lowest index wins.
    std::vector<float> v = random_floats(32003, 7, -1.f, 1.f);
    for (size_t i : {size_t(31999), size_t(20001), size_t(4097), size_t(32002), size_t(1500)})
      v[i] = 5.f;
    cases.push_back({"ties", v});
  }
  {
    std::vector<float> v = random_floats(32000, 8);
    for (size_t i = 0; i < v.size(); i += 3) v[i] = kNan;
    v[0] = kNan;
    cases.push_back({"nan", v});
  }
  cases.push_back({"all nan", std::vector<float>(4099, kNan)});
  cases.push_back({"all -inf", std::vector<float>(5000, -kInf)});
  {
    std::vector<float> v(7000, -kInf);
    v[6999] = kNan;
    v[6998] = -1e30f;
    cases.push_back({"one finite", v});
  }
  {
    std::vector<float> v = random_floats(32000, 9);
    v[77] = kInf;
    v[31000] = kInf;
    v[5] = kNan;
    cases.push_back({"+inf", v});
  }
  int64_t pos = 0;
  for (const Case& c : cases) {
    float* d = dev(c.v);
    const int64_t n = int64_t(c.v.size());
    EXPECT_EQ(device_pick(*backend_, d, n, pos++), greedy_argmax(c.v.data(), n))
        << c.what << ", n = " << n;
  }
}

// A served step's picks (Backend::pick_rows, no draws): rows of one width side by side, so rows of
// an odd width start off the 16-byte boundary that the vector loads need.
TEST_F(CudaTest, ArgmaxRowsMatchHostArgmax) {
  for (int64_t n : {1, 5, 1027, 32000, 32003, 151936}) {
    std::vector<std::vector<float>> rows;
    for (uint32_t r = 0; r < 5; ++r)
      rows.push_back(random_floats(size_t(n), 100 * uint32_t(n) + r));
    rows.push_back(std::vector<float>(size_t(n), kNan));
    rows.push_back(std::vector<float>(size_t(n), -kInf));
    {
      std::vector<float> v = random_floats(size_t(n), 3, -1.f, 1.f);  // ties: the lowest wins
      for (int64_t i = n - 1; i >= 0; i -= std::max<int64_t>(1, n / 7)) v[size_t(i)] = 4.f;
      v[0] = kNan;
      rows.push_back(v);
    }
    std::vector<float> all;
    for (const auto& v : rows) all.insert(all.end(), v.begin(), v.end());
    std::vector<int32_t> ids(rows.size(), -1);
    backend_->pick_rows(dev(all), int64_t(rows.size()), n, {}, ids.data());
    ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
    for (size_t r = 0; r < rows.size(); ++r)
      EXPECT_EQ(ids[r], greedy_argmax(rows[r].data(), n)) << "row " << r << ", n = " << n;
  }
}

// A served step's draws (pick_rows with RowDraws) are the chained decode's draws: same rule,
// seed and position, same token; rows not drawn keep their argmax; a rule with penalties is
// not the rows' to draw.
TEST_F(CudaTest, RowDrawsMatchTheChainedPick) {
  constexpr int64_t n = 32000;
  constexpr int64_t kRows = 6;
  std::vector<float> all;
  for (uint32_t r = 0; r < kRows; ++r) {
    const std::vector<float> v = random_floats(size_t(n), 77 + r, -6.f, 6.f);
    all.insert(all.end(), v.begin(), v.end());
  }
  float* d = dev(all);
  Backend::PickRule rule;
  rule.temperature = 0.8f;
  rule.top_k = 40;
  rule.top_p = 0.95f;
  rule.min_p = 0.05f;
  rule.seed = 1234;
  ASSERT_TRUE(backend_->can_draw_rows(rule));
  std::vector<Backend::RowDraw> draws;
  for (int64_t r : {1, 2, 4}) draws.push_back({r, rule, 100 + 7 * r});
  draws[1].rule.top_k = 0;  // top-p and min-p only
  draws[2].rule.seed = 99;
  std::vector<int32_t> ids(kRows, -1);
  backend_->pick_rows(d, kRows, n, draws, ids.data());
  ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
  for (const Backend::RowDraw& dr : draws) {
    ASSERT_TRUE(backend_->begin_picks(dr.rule, {}).is_ok());
    EXPECT_EQ(ids[size_t(dr.row)], device_pick(*backend_, d + dr.row * n, n, dr.pos))
        << "row " << dr.row;
  }
  for (int64_t r : {0, 3, 5})
    EXPECT_EQ(ids[size_t(r)], greedy_argmax(all.data() + r * n, n)) << "row " << r;
  Backend::PickRule penalized = rule;
  penalized.repeat_penalty = 1.1f;
  penalized.repeat_last_n = 64;
  EXPECT_FALSE(backend_->can_draw_rows(penalized));
}

TEST_F(CudaTest, GreedyPicksOutstandingComeBackInOrder) {
  std::vector<std::vector<float>> rows;
  std::vector<float*> bufs;
  for (uint32_t i = 0; i < 6; ++i) {
    rows.push_back(random_floats(32000, 100 + i));
    bufs.push_back(dev(rows.back()));
  }
  // Positions that share ring slots modulo 16 never overlap: at most 6 are outstanding.
  for (int64_t i = 0; i < 6; ++i) backend_->pick(bufs[size_t(i)], 32000, 40 + i);
  for (int64_t i = 0; i < 6; ++i) {
    auto t = backend_->picked_token(40 + i);
    ASSERT_TRUE(t.is_ok()) << t.message();
    EXPECT_EQ(t.value(), greedy_argmax(rows[size_t(i)].data(), 32000)) << i;
  }
  // A position nobody picked is an error, not a hang or a crash.
  EXPECT_FALSE(backend_->picked_token(40).is_ok());
  EXPECT_FALSE(backend_->picked_token(-1).is_ok());
}

// A random llama-shaped model (2 layers, 1000 tokens) with every layer on the GPU.
class CudaGreedyModelTest : public CudaTest, public testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!backend_) return;
    path_ = temp_dir() + "/greedy-" + std::string(dtype_name(GetParam())) + ".gguf";
    bench::SyntheticSpec spec{};
    spec.shape = bench::SyntheticShape{"greedy-test", 256, 512, 2, 4, 2, 1000, 256, 10000.0};
    spec.type = GetParam();
    auto written = bench::write_synthetic_gguf(spec, path_, 5);
    ASSERT_TRUE(written.is_ok()) << written.message();
    model_ = load();
    ASSERT_TRUE(model_);
    ASSERT_EQ(model_->groups().size(), 1u);
    ASSERT_EQ(model_->groups()[0].backend->name().rfind("cuda", 0), 0u);
    EXPECT_EQ(model_->groups()[0].backend->greedy_chain_depth(), CudaOptions{}.greedy_chain_depth);
  }
  void TearDown() override {
    model_.reset();
    if (!path_.empty()) std::filesystem::remove(path_);
    CudaTest::TearDown();
  }

  std::shared_ptr<Model> load(const CudaOptions& cuda = {}) {
    LoadOptions opt;
    opt.n_threads = 2;
    opt.gpu_layers = -1;
    opt.use_weight_cache = false;
    opt.cuda = cuda;
    auto m = load_model(path_, opt);
    EXPECT_TRUE(m.is_ok()) << m.message();
    return m.is_ok() ? m.value() : nullptr;
  }

  int32_t start(KvCache& kv, ForwardScratch& s, int64_t cap) {
    return test::prefill_and_pick(*model_, {1, 17, 300, 42}, cap, kv, s);
  }
  std::vector<int32_t> loop(KvCache& kv, ForwardScratch& s, int32_t token, int n) {
    return test::greedy_reference(*model_, kv, s, token, n);
  }
  Result<GreedyRun> chain(KvCache& kv, ForwardScratch& s, int32_t token, int64_t max,
                          std::vector<int32_t>& got, int stop_after = -1) {
    return model_->decode_greedy(kv, token, max, s, [&](int32_t t) {
      got.push_back(t);
      return stop_after < 0 || int(got.size()) < stop_after;
    });
  }

  std::string path_;
  std::shared_ptr<Model> model_;
};

TEST_P(CudaGreedyModelTest, ChainedMatchesDecodeArgmaxLoop) {
  constexpr int kSteps = 40;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> want = loop(kv_ref, s_ref, first, kSteps);
  ASSERT_EQ(start(kv, s, 64), first);
  std::vector<int32_t> got;
  auto run = chain(kv, s, first, kSteps, got);
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, kSteps);
  EXPECT_FALSE(run->context_full);
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), kv_ref.used());
  // A second chain on the same buffers starts from a recorded step (replays from step 0).
  kv.set_used(4);
  got.clear();
  auto again = chain(kv, s, first, kSteps, got);
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_EQ(got, want);
}

// GPU layers hold the cache types asked for (Backend::supports_kv_type), K and V apart: an f16 K
// and q8_0 V cache is smaller than f32's and its prefill logits stay close to f32's (the
// kernels' own checks are cuda-kv-types-test.cpp's).
TEST_P(CudaGreedyModelTest, TypedCacheHoldsTypedRowsOnTheGpu) {
  const KvCacheTypes asked{DType::F16, DType::Q8_0}, f32{DType::F32, DType::F32};
  EXPECT_TRUE(model_->groups()[0].backend->supports_kv_type(DType::F16));
  EXPECT_TRUE(model_->groups()[0].backend->supports_kv_type(DType::Q8_0));
  auto typed = model_->new_kv_cache(64, asked);
  auto plain = model_->new_kv_cache(64, f32);
  ASSERT_TRUE(typed.is_ok() && plain.is_ok()) << typed.message() << plain.message();
  EXPECT_EQ(typed->types(), asked);
  EXPECT_EQ(typed->layer_types(0), asked);
  EXPECT_LT(typed->bytes(), plain->bytes() / 2);
  ForwardScratch s1, s2;
  std::vector<float> l1, l2;
  ASSERT_TRUE(model_->prefill(*typed, {1, 17, 300, 42}, s1, &l1).is_ok());
  ASSERT_TRUE(model_->prefill(*plain, {1, 17, 300, 42}, s2, &l2).is_ok());
  EXPECT_NE(l1, l2);
  EXPECT_LT(rel_error(l1, l2), 5e-2);
}

TEST_P(CudaGreedyModelTest, EarlyStopLeavesUsedAndCacheRight) {
  constexpr int kSteps = 30, kStop = 9;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> want = loop(kv_ref, s_ref, first, kSteps);
  start(kv, s, 64);
  std::vector<int32_t> got;
  auto run = chain(kv, s, first, kSteps, got, kStop);
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, kStop);
  EXPECT_EQ(kv.used(), 4 + kStop);
  // Steps queued past the stop wrote rows >= used() only: a plain decode continues the
  // uninterrupted sequence, then a new chain the rest.
  std::vector<int32_t> more = loop(kv, s, got.back(), 3);
  got.insert(got.end(), more.begin(), more.end());
  auto rest = chain(kv, s, got.back(), kSteps - kStop - 3, got);
  ASSERT_TRUE(rest.is_ok()) << rest.message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), kv_ref.used());
}

TEST_P(CudaGreedyModelTest, ContextFullStopsAtCapacity) {
  const int64_t cap = 4 + 12;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, cap);
  const std::vector<int32_t> want = loop(kv_ref, s_ref, first, 12);
  start(kv, s, cap);
  std::vector<int32_t> got;
  auto run = chain(kv, s, first, 1000, got);
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, 12);
  EXPECT_TRUE(run->context_full);
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), cap);
}

// A decode of the same model from inside the chain's callback is an error, not a deadlock, and
// the chain goes on.
TEST_P(CudaGreedyModelTest, DecodeFromTheCallbackIsAnError) {
  KvCache kv, other;
  ForwardScratch s, s_other;
  const int32_t first = start(kv, s, 64);
  start(other, s_other, 64);
  std::vector<int32_t> got;
  int errors = 0;
  auto run = model_->decode_greedy(kv, first, 6, s, [&](int32_t t) {
    got.push_back(t);
    std::vector<float> logits;
    if (!model_->decode(other, t, s_other, &logits).is_ok()) ++errors;
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, 6);
  if (model_->groups()[0].backend->greedy_chain_depth() > 0) {
    EXPECT_EQ(errors, 6);
  }
}

// Chain depth 1 (device pick, nothing queued ahead), 0 (the host loop) and the deepest give the
// same tokens as the default depth (LoadOptions::cuda, given to the backend when it is made).
TEST_P(CudaGreedyModelTest, ChainDepthsAgree) {
  constexpr int kSteps = 24;
  // The cache and scratch below free through this model's backend: it outlives them.
  const std::shared_ptr<Model> ref_model = model_;
  KvCache kv_ref;
  ForwardScratch s_ref;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> want = loop(kv_ref, s_ref, first, kSteps);
  for (int depth : {1, 0, CudaOptions::kMaxGreedyChainDepth}) {
    CudaOptions cuda;
    cuda.greedy_chain_depth = depth;
    model_ = load(cuda);
    ASSERT_TRUE(model_);
    EXPECT_EQ(model_->groups()[0].backend->greedy_chain_depth(), depth);
    KvCache kv;
    ForwardScratch s;
    ASSERT_EQ(start(kv, s, 64), first) << "chain depth " << depth;
    std::vector<int32_t> got;
    auto run = chain(kv, s, first, kSteps, got, 17);
    ASSERT_TRUE(run.is_ok()) << run.message();
    EXPECT_EQ(run->steps, 17);
    EXPECT_EQ(kv.used(), 4 + 17);
    EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + 17))
        << "chain depth " << depth;
  }
}

// Sampled chains (Model::decode_chained). At temperature 0 with penalties the pick is the
// penalised argmax, so the chain must give the host loop's tokens (decode + the CPU Sampler over
// the same history: the device's window and its appends); at temperature 0.8 the same seed gives
// the same tokens twice.
TEST_P(CudaGreedyModelTest, SampledChainsFollowTheHostSampler) {
  constexpr int kSteps = 24;
  SamplingParams p;
  p.temperature = 0, p.repeat_penalty = 1.5f, p.repeat_last_n = 8, p.presence_penalty = 0.3f;
  p.seed = 9;
  Backend::PickRule rule;
  rule.temperature = 0, rule.repeat_penalty = 1.5f, rule.repeat_last_n = 8;
  rule.presence_penalty = 0.3f, rule.seed = 9;
  KvCache kv_ref;
  ForwardScratch s_ref;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> window = {1, 17, 300, 42, first};  // the prompt, then the fed token
  std::vector<int32_t> history = window, want;
  Sampler sampler(p);
  int32_t token = first;
  std::vector<float> logits;
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_TRUE(model_->decode(kv_ref, token, s_ref, &logits).is_ok());
    token = sampler.sample(logits.data(), 1000, history);
    history.push_back(token);
    want.push_back(token);
  }
  ASSERT_TRUE(model_->can_chain(rule, int64_t(window.size())));
  auto chained = [&](const Backend::PickRule& r) {
    KvCache kv;
    ForwardScratch s;
    start(kv, s, 64);
    std::vector<int32_t> got;
    auto run = model_->decode_chained(kv, first, kSteps, s, r, window, [&](int32_t t) {
      got.push_back(t);
      return true;
    });
    EXPECT_TRUE(run.is_ok()) << run.message();
    return got;
  };
  EXPECT_EQ(chained(rule), want);
  rule.temperature = 0.8f, rule.top_k = 40, rule.top_p = 0.95f, rule.min_p = 0.05f;
  const std::vector<int32_t> a = chained(rule), b = chained(rule);
  EXPECT_EQ(a.size(), size_t(kSteps));
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaGreedyModelTest, testing::Values(DType::Q4_0, DType::F16),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace hearth::test
