// Conversions against llama.cpp's files and the HF goldens: Q8_0 tensors byte-identical to
// llama.cpp's converter, bf16 files identical too, quantized round trips within the KLD bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "base/half.h"
#include "formats/gguf.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"
#include "runtime/convert/convert.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "support/golden-data.h"
#include "support/golden-run.h"
#include "support/test-data.h"

namespace hearth {
namespace {

std::string golden_dir(const std::string& name) {
  return test::shared_path("goldens/" + name);
}

std::string convert_to(const std::string& model, const std::string& type) {
  const std::string out = test::temp_dir() + "/" + model + "-" + type + ".gguf";
  Status s = convert_hf_to_gguf(golden_dir(model), out, type, nullptr, 2);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

// Into the test's temp dir whatever folder `in` is in: the shared test data is read-only.
std::string quantize_to(const std::string& in, const std::string& type) {
  const std::string name = in.substr(in.find_last_of('/') + 1);
  const std::string out =
      test::temp_dir() + "/" + name.substr(0, name.size() - 5) + "-to-" + type + ".gguf";
  Status s = quantize_gguf(in, out, type, nullptr, 2);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

GgufFile open_gguf(const std::string& path) {
  auto f = GgufFile::open(path);
  if (!f.is_ok()) throw std::runtime_error(f.message());
  return std::move(f).value();
}

// Same tensor set; per tensor the same type and shape, and (when `bytes`) the same data.
void expect_same_tensors(const std::string& ours_path, const std::string& ref_path, bool bytes) {
  GgufFile ours = open_gguf(ours_path), ref = open_gguf(ref_path);
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (const auto& r : ref.tensors()) {
    SCOPED_TRACE(r.name);
    const TensorView* o = ours.find_tensor(r.name);
    ASSERT_NE(o, nullptr) << "missing tensor";
    EXPECT_STREQ(dtype_name(o->dtype), dtype_name(r.dtype));
    EXPECT_EQ(o->shape, r.shape);
    if (bytes && o->dtype == r.dtype && o->nbytes == r.nbytes) {
      EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << "tensor bytes differ";
    }
  }
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  return a.type == b.type && a.u == b.u && a.i == b.i && a.b == b.b && a.s == b.s &&
         float(a.f) == float(b.f) && a.elem_type == b.elem_type && a.ints == b.ints &&
         a.floats == b.floats && a.strings == b.strings;
}

// Every key llama.cpp wrote has the same type and value in ours, except the basename/finetune
// split its converter guesses from the directory name (labels no loader reads).
void expect_same_metadata(const std::string& ours_path, const std::string& ref_path) {
  GgufFile ours = open_gguf(ours_path), ref = open_gguf(ref_path);
  for (const auto& [key, v] : ref.metadata()) {
    SCOPED_TRACE(key);
    if (key == "general.basename" || key == "general.finetune") continue;
    const GgufValue* o = ours.find(key);
    ASSERT_NE(o, nullptr) << "missing key";
    EXPECT_TRUE(same_value(*o, v)) << "value differs";
  }
}

std::shared_ptr<Engine> load(const std::string& path) {
  LoadOptions opt;
  opt.n_threads = 2;
  auto e = Engine::load(path, opt);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return e.is_ok() ? e.value() : nullptr;
}

// Loads `path` and runs `model`'s golden prompt through it (a `ctx`-token session).
void run_golden_prompt(const std::string& path, const std::string& model, int ctx, test::Golden& g,
                       std::shared_ptr<Engine>& engine, std::vector<float>& logits) {
  g = test::load_golden(golden_dir(model));
  engine = load(path);
  ASSERT_TRUE(engine);
  Session s(engine, ctx, test::kF32Cache);  // the goldens' f32 math (golden-run.h)
  ASSERT_TRUE(s.init().is_ok());
  auto r = s.all_logits(g.input_ids);
  ASSERT_TRUE(r.is_ok()) << r.message();
  logits = std::move(*r);
}

// Full-precision conversions: logits to 1e-4 and greedy ids exact, as in tests/golden.
void expect_reproduces_golden(const std::string& path, const std::string& model) {
  test::Golden g;
  std::shared_ptr<Engine> engine;
  std::vector<float> logits;
  ASSERT_NO_FATAL_FAILURE(run_golden_prompt(path, model, 256, g, engine, logits));
  EXPECT_LE(test::max_row_relative_error(logits, g.logits, g.n_vocab), 1e-4);
  auto ids = test::greedy_continuation(engine, g);
  ASSERT_TRUE(ids.is_ok()) << ids.message();
  EXPECT_EQ(*ids, g.gen_ids);
}

// Quantized files: mean KL(golden || ours) within the golden suite's bound for the ideal of
// llama.cpp's file of the same type.
void expect_kld_within(const std::string& path, const std::string& model, double ideal) {
  test::Golden g;
  std::shared_ptr<Engine> engine;
  std::vector<float> logits;
  ASSERT_NO_FATAL_FAILURE(run_golden_prompt(path, model, 64, g, engine, logits));
  const double kld = test::mean_kl_divergence(logits, g.logits, g.n_vocab);
  std::printf("[ kld ] %s mean KL %.6f (ideal %.6f, bound %.6f)\n", path.c_str(), kld, ideal,
              1.10 * ideal + 1e-4);
  EXPECT_LE(kld, 1.10 * ideal + 1e-4);
}

TEST(Convert, Llama2Q8_0IsByteIdenticalToLlamaCpp) {
  const std::string ref = golden_dir("llama2-tiny") + "/llama2-tiny-q8_0.gguf";
  const std::string out = convert_to("llama2-tiny", "q8_0");
  expect_same_tensors(out, ref, true);
  expect_same_metadata(out, ref);
}

TEST(Convert, Bf16FilesAreIdenticalToLlamaCppAndReproduceGoldens) {
  for (const std::string model : {"llama2-tiny", "llama3-tiny"}) {
    SCOPED_TRACE(model);
    const std::string ref = golden_dir(model) + "/" + model + "-bf16.gguf";
    const std::string out = convert_to(model, "bf16");
    expect_same_tensors(out, ref, true);  // llama3: rope_freqs.weight included
    expect_same_metadata(out, ref);
    expect_reproduces_golden(out, model);
  }
}

TEST(Convert, F16AndF32ReproduceGoldens) {
  expect_reproduces_golden(convert_to("llama2-tiny", "f16"), "llama2-tiny");
  expect_reproduces_golden(convert_to("llama3-tiny", "f32"), "llama3-tiny");
}

TEST(Convert, Qwen2KeepsHalvesLayoutAndBiases) {
  const std::string out = convert_to("qwen2-tiny", "bf16");
  GgufFile f = open_gguf(out);
  EXPECT_EQ(f.get_string("general.architecture").value(), std::optional<std::string>("qwen2"));
  ASSERT_NE(f.find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias")->dtype, DType::F32);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  expect_reproduces_golden(out, "qwen2-tiny");
}

struct RoundTrip {
  std::string model, type;
  double ideal;  // goldens/README.md, llama.cpp's file of this type
};

class ConvertQuantize : public testing::TestWithParam<RoundTrip> {};

// bf16 -> TYPE through `quantize`: llama-quantize's type and bytes for every tensor (the same
// mixing rules and the same reference quantizers), its metadata, and the KLD bound.
TEST_P(ConvertQuantize, RoundTripMatchesLlamaCppFileAndKld) {
  const RoundTrip& c = GetParam();
  const std::string bf16 = convert_to(c.model, "bf16");
  const std::string out = quantize_to(bf16, c.type);
  const std::string ref = golden_dir(c.model) + "/" + c.model + "-" + c.type + ".gguf";
  expect_same_tensors(out, ref, true);
  expect_same_metadata(out, ref);
  expect_kld_within(out, c.model, c.ideal);
}

std::string round_trip_name(const testing::TestParamInfo<RoundTrip>& info) {
  std::string n = info.param.model + "_" + info.param.type;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Goldens, ConvertQuantize,
                         testing::Values(RoundTrip{"llama-k256", "q4_0", 0.261},
                                         RoundTrip{"llama-k256", "q4_k_m", 0.158},
                                         RoundTrip{"llama-k256", "q5_k_m", 0.0426},
                                         RoundTrip{"llama-k256", "q6_k", 0.0189},
                                         RoundTrip{"llama-k256", "q8_0", 0.00176},
                                         RoundTrip{"kjv-13m", "q4_0", 0.0189},
                                         RoundTrip{"kjv-13m", "q4_k_m", 0.0112},
                                         RoundTrip{"kjv-13m", "q8_0", 0.00012},
                                         RoundTrip{"llama3-tiny", "q4_0", 0.0768}),
                         round_trip_name);

// Converting straight to a quantized type gives the same file as bf16 -> quantize.
TEST(Convert, DirectQuantizedConversionEqualsConvertThenQuantize) {
  const std::string direct = convert_to("kjv-13m", "q4_k_m");
  const std::string two_step = quantize_to(convert_to("kjv-13m", "bf16"), "q4_k_m");
  expect_same_tensors(direct, two_step, true);
}

// llama2-tiny's 96-wide rows fit no K-quant super-block: llama-quantize's fallbacks apply
// (Q4_K -> Q5_0, Q6_K -> Q8_0 for the LM head) and the file still runs.
TEST(Convert, RowsThatFitNoSuperBlockFallBack) {
  const std::string out = quantize_to(convert_to("llama2-tiny", "bf16"), "q4_k_m");
  GgufFile f = open_gguf(out);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->dtype, DType::Q5_0);
  EXPECT_EQ(f.find_tensor("blk.1.attn_v.weight")->dtype, DType::Q8_0);    // Q6_K preferred
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->dtype, DType::Q6_K);  // 256-wide rows fit
  EXPECT_EQ(f.find_tensor("output.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->dtype, DType::Q5_0);
  EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->dtype, DType::F32);
  auto engine = load(out);
  ASSERT_TRUE(engine);
  test::Golden g = test::load_golden(golden_dir("llama2-tiny"));
  Session s(engine, 64);
  ASSERT_TRUE(s.init().is_ok());
  auto logits = s.all_logits(g.input_ids);
  ASSERT_TRUE(logits.is_ok()) << logits.message();
  EXPECT_LT(test::mean_kl_divergence(*logits, g.logits, g.n_vocab), 0.5);
}

// Requantizing keeps metadata (tokenizer, hparams) and updates only general.file_type.
TEST(Quantize, CopiesMetadataAndUpdatesFileType) {
  const std::string src = golden_dir("llama2-tiny") + "/llama2-tiny-bf16.gguf";
  const std::string out = quantize_to(src, "q8_0");
  GgufFile a = open_gguf(src), b = open_gguf(out);
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    SCOPED_TRACE(a.metadata()[i].first);
    EXPECT_EQ(a.metadata()[i].first, b.metadata()[i].first);
    if (a.metadata()[i].first == "general.file_type")
      EXPECT_EQ(b.metadata()[i].second.u, 7u);
    else
      EXPECT_TRUE(same_value(a.metadata()[i].second, b.metadata()[i].second));
  }
  // bf16 -> q8_0 by quantize gives exactly llama.cpp's converter output (same quantizer).
  expect_same_tensors(out, golden_dir("llama2-tiny") + "/llama2-tiny-q8_0.gguf", true);
}

// Requantizing an already quantized file (Q8_0 -> Q4_K_M) decodes through the dequantizers and
// applies the same per-tensor rules as from bf16.
TEST(Quantize, RequantizesQuantizedInput) {
  const std::string src = golden_dir("llama-k256") + "/llama-k256-q8_0.gguf";
  const std::string out = test::temp_dir() + "/k256-q8-to-q4_k_m.gguf";
  Status s = quantize_gguf(src, out, "q4_k_m", nullptr, 2);
  ASSERT_TRUE(s.is_ok()) << s.message();
  expect_same_tensors(out, golden_dir("llama-k256") + "/llama-k256-q4_k_m.gguf", false);
  // Double rounding costs a little over the ideal of a direct Q4_K_M file, not a lot.
  expect_kld_within(out, "llama-k256", 0.158 * 1.5);
}

// A quantized tensor whose row length is not a multiple of its block size (40 is not a multiple
// of Q4_0's 32) is refused with one clear line naming the file.
TEST(Quantize, MalformedQuantizedTensorIsAClearError) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.add_tensor("blk.0.attn_q.weight", DType::Q4_0, {4, 40}, std::vector<uint8_t>(4 * 2 * 18));
  const std::string path = test::temp_dir() + "/bad-q4_0.gguf";
  const std::vector<uint8_t> bytes = w.to_bytes();
  test::write_file(path, std::string(bytes.begin(), bytes.end()));
  Status s = quantize_gguf(path, test::temp_dir() + "/bad-out.gguf", "q8_0");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("bad-q4_0.gguf"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

// Q3_K input, which no kernel reads, decodes through the rewrite the loader runs it as (Q6_K,
// model/weight-transcode.h): requantized to f32, every weight is ggml's Q3_K value, bit for bit.
TEST(Quantize, ReadsQ3kInputAsTheLoaderRunsIt) {
  const int64_t rows = 3, cols = 512;
  std::vector<kernels::BlockQ3_K> q3(size_t(rows * cols / 256));
  std::mt19937 rng(7);
  for (auto& b : q3) {
    auto* bytes = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof b; ++i) bytes[i] = uint8_t(rng());
    b.d = f32_to_fp16(std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng));
  }
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  const auto* raw = reinterpret_cast<const uint8_t*>(q3.data());
  w.add_tensor("blk.0.attn_q.weight", DType::Q3_K, {rows, cols},
               std::vector<uint8_t>(raw, raw + q3.size() * sizeof(kernels::BlockQ3_K)));
  const std::string path = test::temp_dir() + "/q3_k-in.gguf";
  const std::vector<uint8_t> bytes = w.to_bytes();
  test::write_file(path, std::string(bytes.begin(), bytes.end()));
  const std::string out = quantize_to(path, "f32");
  GgufFile f = open_gguf(out);
  const TensorView* t = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->dtype, DType::F32);
  ASSERT_EQ(t->nbytes, size_t(rows * cols * 4));
  std::vector<float> want(size_t(rows * cols));
  kernels::ref::dequantize_q3_k(q3.data(), want.data(), rows * cols);
  EXPECT_EQ(std::memcmp(t->data, want.data(), t->nbytes), 0);
}

TEST(Convert, ErrorsAreOneLineAndNameTheProblem) {
  const std::string out = test::temp_dir() + "/never.gguf";
  Status s = convert_hf_to_gguf(golden_dir("llama2-tiny"), out, "q3_k_xl");
  EXPECT_NE(s.message().find("unsupported output type 'q3_k_xl'"), std::string::npos)
      << s.message();
  s = convert_hf_to_gguf(test::temp_dir() + "/no-such-dir", out, "bf16");
  EXPECT_NE(s.message().find("no-such-dir"), std::string::npos) << s.message();
  s = convert_hf_to_gguf(test::temp_dir(), out, "bf16");  // a directory without config.json
  EXPECT_NE(s.message().find("config.json"), std::string::npos) << s.message();
  s = quantize_gguf(test::temp_dir() + "/missing.gguf", out, "q4_0");
  EXPECT_NE(s.message().find("missing.gguf"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_FALSE(std::ifstream(out).good()) << "a failed conversion left a file behind";
}

}  // namespace
}  // namespace hearth
