// apps/bench: --synthetic parsing, a synthetic GGUF of a small custom shape that the normal
// loader runs, mean/sd, the three report formats, the machine probes returning sane values, and
// run_bench's --depth and sampled rows on a small model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "base/cpu-features.h"
#include "base/mapped-file.h"
#include "batch-decode.h"
#include "bench-report.h"
#include "bench-runner.h"
#include "formats/gguf.h"
#include "kernels/cpu/kernel-table.h"
#include "machine-probe.h"
#include "model/model.h"
#include "support/test-data.h"
#include "synthetic-model.h"
#include "tokenizer/tokenizer.h"

namespace hearth::bench {
namespace {

TEST(Synthetic, ParsesShapesAndTypes) {
  auto s = parse_synthetic("llama2-7b:q4_0");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->shape.n_embd, 4096);
  EXPECT_EQ(s->shape.n_ff, 11008);
  EXPECT_EQ(s->type, DType::Q4_0);
  auto t = parse_synthetic("TinyLlama-1B:Q6_K");
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->shape.n_head_kv, 4);
  EXPECT_EQ(t->type, DType::Q6_K);
  EXPECT_EQ(parse_synthetic("llama3-8b:bf16")->shape.n_vocab, 128256);
  for (const char* bad : {"llama2-7b", "llama2-7b:", "gpt2:q4_0", "llama2-7b:q5_1", ":q4_0", ""}) {
    auto r = parse_synthetic(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.message().find("--synthetic"), std::string::npos) << r.message();
    }
  }
}

// A small shape through the real writer and loader: every type must load and decode finitely.
TEST(Synthetic, WritesAModelTheLoaderRuns) {
  const std::string dir = test::temp_dir();
  for (DType t :
       {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F16, DType::BF16}) {
    SyntheticSpec spec{{"test-small", 256, 512, 2, 4, 2, 300, 128, 10000.0}, t};
    const std::string path = dir + "/small-" + dtype_name(t) + ".gguf";
    auto bytes = write_synthetic_gguf(spec, path);
    ASSERT_TRUE(bytes.is_ok()) << bytes.message();
    EXPECT_EQ(*bytes, std::filesystem::file_size(path));
    LoadOptions opt;
    opt.n_threads = 2;
    opt.use_weight_cache = false;
    auto m = load_model(path, opt);
    ASSERT_TRUE(m.is_ok()) << dtype_name(t) << ": " << m.message();
    EXPECT_EQ((*m)->hparams().n_vocab, 300);
    EXPECT_EQ((*m)->hparams().n_head_kv, 2);
    auto kv = (*m)->new_kv_cache(8);
    ASSERT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    std::vector<float> logits;
    ASSERT_TRUE((*m)->prefill(*kv, {1, 2, 3}, scratch, &logits).is_ok());
    ASSERT_TRUE((*m)->decode(*kv, 4, scratch, &logits).is_ok());
    ASSERT_EQ(logits.size(), 300u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
  }
}

// The 2025 families' shapes: the real sizes parse, and a small model of each family's blocks
// (Qwen3's per-head norms; Gemma 2's head_dim != n_embd / n_head, sandwich norms, soft-caps,
// sliding window and tied LM head) loads as that family and decodes finitely.
TEST(Synthetic, FamilyShapesLoadAsTheirFamily) {
  auto q = parse_synthetic("qwen3-8b:q4_k");
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->shape.arch, "qwen3");
  EXPECT_EQ(q->shape.n_vocab, 151936);
  auto g = parse_synthetic("gemma2-9b:q4_0");
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(g->shape.head_dim, 256);
  EXPECT_EQ(g->shape.n_layer, 42);
  auto moe = parse_synthetic("qwen3-30b-a3b:q4_k");
  ASSERT_TRUE(moe.is_ok()) << moe.message();
  EXPECT_EQ(moe->shape.arch, "qwen3moe");
  EXPECT_EQ(moe->shape.n_layer, 48);
  EXPECT_EQ(moe->shape.n_expert, 128);
  EXPECT_EQ(moe->shape.n_expert_used, 8);
  EXPECT_EQ(moe->shape.n_ff_exp, 768);
  auto g3 = parse_synthetic("gemma3-27b:q4_k");
  ASSERT_TRUE(g3.is_ok()) << g3.message();
  EXPECT_EQ(g3->shape.arch, "gemma3");
  EXPECT_EQ(g3->shape.head_dim, 128);
  EXPECT_EQ(g3->shape.sliding_window, 1024);
  auto oss = parse_synthetic("gpt-oss-20b:q8_0");
  ASSERT_TRUE(oss.is_ok()) << oss.message();
  EXPECT_EQ(oss->shape.arch, "gpt-oss");
  EXPECT_EQ(oss->shape.expert_type, DType::MXFP4);
  EXPECT_EQ(oss->shape.n_vocab, 201088);
  // Its width (2880) is not whole K-quant super-blocks: a one-line error naming the tensor.
  auto k_quant = write_synthetic_gguf({oss->shape, DType::Q4_K}, test::temp_dir() + "/oss.gguf");
  ASSERT_FALSE(k_quant.is_ok());
  EXPECT_NE(k_quant.message().find("token_embd.weight rows (2880) are not whole Q4_K blocks"),
            std::string::npos)
      << k_quant.message();
  const std::string dir = test::temp_dir();
  for (SyntheticShape small : {q->shape, g->shape, g3->shape, moe->shape, oss->shape}) {
    small.n_embd = 256, small.n_ff = 512, small.n_layer = 2, small.n_head = 4, small.n_head_kv = 2;
    small.n_vocab = 300, small.n_ctx = 128, small.head_dim = 96;
    if (small.sliding_window) small.sliding_window = 4;
    if (small.n_expert) small.n_expert = 8, small.n_expert_used = 2, small.n_ff_exp = 64;
    const SyntheticSpec spec{small, DType::Q8_0};
    const std::string path = dir + "/small-" + small.arch + ".gguf";
    ASSERT_TRUE(write_synthetic_gguf(spec, path).is_ok()) << small.arch;
    LoadOptions opt;
    opt.n_threads = 2;
    opt.use_weight_cache = false;
    auto m = load_model(path, opt);
    ASSERT_TRUE(m.is_ok()) << small.arch << ": " << m.message();
    const HParams& hp = (*m)->hparams();
    EXPECT_EQ(hp.head_dim, 96) << small.arch;
    EXPECT_EQ(hp.final_softcap, small.final_softcap) << small.arch;
    EXPECT_EQ(hp.tied_embeddings, small.tied_output) << small.arch;
    EXPECT_EQ(hp.n_expert, small.n_expert) << small.arch;
    if (small.n_expert) {
      EXPECT_TRUE(hp.moe_norm_topk);
    }
    if (small.arch == "gpt-oss") {  // YaRN read, sinks and biases written, experts in MXFP4
      EXPECT_EQ(hp.rope_scaling, "yarn");
      auto f = GgufFile::open(path);
      ASSERT_TRUE(f.is_ok()) << f.message();
      for (const char* name : {"blk.1.attn_sinks.weight", "blk.1.attn_output.bias",
                               "blk.1.ffn_down_exps.bias", "blk.1.post_attention_norm.weight"})
        EXPECT_NE(f->find_tensor(name), nullptr) << name;
      const auto* gate = f->find_tensor("blk.1.ffn_gate_exps.weight");
      ASSERT_NE(gate, nullptr);
      EXPECT_EQ(gate->dtype, DType::MXFP4);
    }
    auto kv = (*m)->new_kv_cache(16);
    ASSERT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    std::vector<float> logits;
    ASSERT_TRUE((*m)->prefill(*kv, {1, 2, 3, 4, 5, 6}, scratch, &logits).is_ok()) << small.arch;
    ASSERT_TRUE((*m)->decode(*kv, 7, scratch, &logits).is_ok()) << small.arch;
    ASSERT_EQ(logits.size(), 300u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << small.arch;
  }
}

// q4_k_m writes llama-quantize's Q4_K_M mix: the LM head (tied or not) and attn_v / ffn_down of
// the more-bits layers in Q6_K (for 16 layers: 0, 1, 4, 7, 10, 13, 14, 15), the rest in Q4_K;
// the file loads and decodes.
TEST(Synthetic, Q4KMixPutsLlamaQuantizesTensorsInQ6K) {
  auto spec = parse_synthetic("tinyllama-1b:q4_k_m");
  ASSERT_TRUE(spec.is_ok()) << spec.message();
  EXPECT_TRUE(spec->k_m_mix);
  EXPECT_EQ(spec->type, DType::Q4_K);
  EXPECT_EQ(synthetic_type_name(*spec), "q4_k_m");
  auto plain = parse_synthetic("llama2-7b:q4_0");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(synthetic_type_name(*plain), "q4_0");
  auto five = parse_synthetic("llama2-7b:Q5_K_M");
  ASSERT_TRUE(five.is_ok()) << five.message();
  EXPECT_EQ(five->type, DType::Q5_K);
  EXPECT_TRUE(five->k_m_mix);
  EXPECT_EQ(synthetic_type_name(*five), "q5_k_m");
  EXPECT_FALSE(parse_synthetic("llama2-7b:q6_k_m").is_ok());
  const std::string dir = test::temp_dir();
  for (bool tied : {false, true}) {
    SyntheticSpec small{{"test-mix", 256, 512, 16, 4, 2, 300, 128, 10000.0}, DType::Q4_K, true};
    small.shape.tied_output = tied;
    const std::string path = dir + "/mix-" + std::to_string(tied) + ".gguf";
    ASSERT_TRUE(write_synthetic_gguf(small, path).is_ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    const std::set<int> more_bits = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int l = 0; l < 16; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const DType want = more_bits.count(l) ? DType::Q6_K : DType::Q4_K;
      EXPECT_EQ(f->find_tensor(p + "attn_v.weight")->dtype, want) << l;
      EXPECT_EQ(f->find_tensor(p + "ffn_down.weight")->dtype, want) << l;
      EXPECT_EQ(f->find_tensor(p + "attn_q.weight")->dtype, DType::Q4_K) << l;
      EXPECT_EQ(f->find_tensor(p + "ffn_up.weight")->dtype, DType::Q4_K) << l;
    }
    EXPECT_EQ(f->find_tensor("token_embd.weight")->dtype, tied ? DType::Q6_K : DType::Q4_K);
    if (!tied) {
      EXPECT_EQ(f->find_tensor("output.weight")->dtype, DType::Q6_K);
    }
    LoadOptions opt;
    opt.n_threads = 2;
    opt.use_weight_cache = false;
    auto m = load_model(path, opt);
    ASSERT_TRUE(m.is_ok()) << m.message();
    auto kv = (*m)->new_kv_cache(8);
    ASSERT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    std::vector<float> logits;
    ASSERT_TRUE((*m)->prefill(*kv, {1, 2, 3}, scratch, &logits).is_ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// A synthetic file carries a tokenizer of exactly its vocabulary (llama.cpp's loader requires
// one: the bench's peer figures load the same file), which the engine's own loader reads.
TEST(Synthetic, CarriesAVocabularyOfItsSize) {
  const std::string dir = test::temp_dir();
  for (int64_t n_vocab : {int64_t(300), int64_t(1000)}) {
    SyntheticSpec spec{{"test-vocab", 256, 512, 1, 4, 2, n_vocab, 128, 10000.0}, DType::Q8_0};
    const std::string path = dir + "/vocab-" + std::to_string(n_vocab) + ".gguf";
    ASSERT_TRUE(write_synthetic_gguf(spec, path).is_ok());
    auto gguf = GgufFile::open(path);
    ASSERT_TRUE(gguf.is_ok()) << gguf.message();
    auto tok = Tokenizer::from_gguf(*gguf);
    ASSERT_TRUE(tok.is_ok()) << tok.message();
    EXPECT_EQ((*tok)->n_vocab(), n_vocab);
    EXPECT_EQ((*tok)->token_bytes(3 + 'A'), "A");  // the byte tokens follow the 3 specials
    EXPECT_EQ((*tok)->token_text(int32_t(n_vocab - 1)), "\u2581t" + std::to_string(n_vocab - 1));
  }
}

// The CPU MoE comparison pair (docs/performance.md): the dense twin has the MoE's attention and,
// as its FFN, the top-k experts side by side, so both read the same bytes per token.
TEST(Synthetic, MoeMiniAndItsDenseTwinReadTheSameBytes) {
  auto moe = parse_synthetic("qwen3-moe-mini:q4_k");
  auto dense = parse_synthetic("qwen3-moe-mini-dense:q4_0");
  ASSERT_TRUE(moe.is_ok() && dense.is_ok());
  const SyntheticShape &a = moe->shape, &b = dense->shape;
  EXPECT_EQ(a.arch, "qwen3moe");
  EXPECT_EQ(b.arch, "qwen3");
  EXPECT_EQ(a.n_expert, 128);
  EXPECT_EQ(a.n_expert_used, 8);
  EXPECT_EQ(b.n_expert, 0);
  EXPECT_EQ(b.n_ff, a.n_expert_used * a.n_ff_exp);
  EXPECT_EQ(std::tie(a.n_embd, a.n_layer, a.n_head, a.n_head_kv, a.head_dim, a.n_vocab, a.qk_norm),
            std::tie(b.n_embd, b.n_layer, b.n_head, b.n_head_kv, b.head_dim, b.n_vocab, b.qk_norm));
}

// A small Q8_0 synthetic model written to `path`, benched quickly: two repetitions, one thread.
BenchOptions small_bench(const std::string& path) {
  SyntheticSpec spec{{"test-small", 256, 512, 2, 4, 2, 300, 128, 10000.0}, DType::Q8_0};
  EXPECT_TRUE(write_synthetic_gguf(spec, path).is_ok());
  BenchOptions o;
  o.model_path = path;
  o.reps = 2;
  o.threads = 1;
  o.no_cache = true;
  o.bandwidth_bytes = 16u << 20;
  return o;
}

// --depth within the context adds " @ dD" rows (pp, ttft, tg and tg sampled, the roofline of
// the latter two counting the cache at that depth); beyond it is a one-line error.
TEST(RunBench, DepthAndSampledRows) {
  const std::string path = test::temp_dir() + "/bench-depth.gguf";
  BenchOptions o = small_bench(path);
  o.prompt_sizes = {8};
  o.n_gen = 6;
  o.depth = 100;
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 0;
  sp.top_p = 0.95f;
  o.sampling = sp;
  auto r = run_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->depth, 100);
  EXPECT_EQ(r->sampling, "temp 0.8 top-k 0 top-p 0.95 min-p 0.05");
  std::map<std::string, Figure> by_name;
  for (const Figure& f : r->figures) by_name[f.test] = f;
  // Rows name the KV cache type they ran with (default f16).
  for (const char* name : {"pp8 @ d100 kv f16", "ttft pp8 @ d100 kv f16", "tg6 @ d100 kv f16",
                           "tg6 sampled @ d100 kv f16"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].value.n, 2) << name;
    EXPECT_GT(by_name[name].value.mean, 0) << name;
  }
  // Same bytes per token for both tg rows; deeper means more cache bytes, a lower roofline.
  EXPECT_EQ(by_name["tg6 @ d100 kv f16"].roofline, by_name["tg6 sampled @ d100 kv f16"].roofline);
  const nlohmann::json j = nlohmann::json::parse(render_json(*r));
  EXPECT_EQ(j["depth"], 100);
  EXPECT_EQ(j["sampling"], "temp 0.8 top-k 0 top-p 0.95 min-p 0.05");

  o.depth = 0;
  o.sampling.reset();
  auto shallow = run_bench(o);
  ASSERT_TRUE(shallow.is_ok()) << shallow.message();
  std::optional<double> roof0;
  for (const Figure& f : shallow->figures) {
    EXPECT_EQ(f.test.find('@'), std::string::npos) << f.test;
    EXPECT_EQ(f.test.find("sampled"), std::string::npos) << f.test;
    if (f.test == "tg6 kv f16") roof0 = f.roofline;
  }
  // Bytes per token = bandwidth / roofline (each run measures its own bandwidth).
  ASSERT_TRUE(roof0 && by_name["tg6 @ d100 kv f16"].roofline);
  const double bytes0 = shallow->devices[0].bandwidth_gbs / *roof0;
  const double bytes100 = r->devices[0].bandwidth_gbs / *by_name["tg6 @ d100 kv f16"].roofline;
  // 100 more cached positions of K and V; the depth-100 cache holds 100 + 8 + 6 + 8 of them.
  const double per_position = double(r->kv_bytes) / (100 + 8 + 6 + 8);
  EXPECT_GE(per_position, 2 * 2 * 128 * 2.0);  // layers x kv_dim x (K, V) x at least 2 bytes
  EXPECT_NEAR((bytes100 - bytes0) * 1e9, 100 * per_position, 1.0);

  // Several cache types in one run: a row each, alternated; fewer bytes a position, fewer bytes
  // a token (a higher roofline) at depth.
  o.depth = 64;
  o.kv_types = {{DType::F32, DType::F32}, {DType::F16, DType::F16}, {DType::Q8_0, DType::F16}};
  auto typed = run_bench(o);
  ASSERT_TRUE(typed.is_ok()) << typed.message();
  std::map<std::string, Figure> typed_rows;
  for (const Figure& f : typed->figures) typed_rows[f.test] = f;
  for (const char* name : {"tg6 @ d64 kv f32", "tg6 @ d64 kv f16", "tg6 @ d64 kv q8_0/f16",
                           "pp8 @ d64 kv f32", "ttft pp8 @ d64 kv q8_0/f16"}) {
    ASSERT_TRUE(typed_rows.count(name)) << name;
    EXPECT_EQ(typed_rows[name].value.n, 2) << name;
  }
  EXPECT_LT(*typed_rows["tg6 @ d64 kv f32"].roofline, *typed_rows["tg6 @ d64 kv f16"].roofline);
  EXPECT_LT(*typed_rows["tg6 @ d64 kv f16"].roofline,
            *typed_rows["tg6 @ d64 kv q8_0/f16"].roofline);
  o.kv_types = {KvCacheTypes{}};

  o.depth = 121;  // + the 8-token prompt > the shape's context of 128
  auto deep = run_bench(o);
  ASSERT_FALSE(deep.is_ok());
  EXPECT_NE(deep.message().find("--depth 121"), std::string::npos) << deep.message();
  EXPECT_NE(deep.message().find("context of 128"), std::string::npos) << deep.message();
  EXPECT_EQ(deep.message().find('\n'), std::string::npos) << deep.message();
  // -c/--ctx-size past the trained context makes room (with a notice); one still too small
  // is named in the error.
  std::vector<std::string> said;
  o.progress = [&](const std::string& s) { said.push_back(s); };
  o.ctx_size = 100;
  auto small = run_bench(o);
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.message().find("context (--ctx-size) of 100"), std::string::npos)
      << small.message();
  o.ctx_size = 256;
  auto wide = run_bench(o);
  ASSERT_TRUE(wide.is_ok()) << wide.message();
  bool noticed = false;
  for (const std::string& s : said)
    noticed |= s.find("exceeds the model's trained context") != std::string::npos;
  EXPECT_TRUE(noticed);
  std::filesystem::remove(path);
}

// --batch B: a "tg<n> x B" row of B sequences decoded in lockstep, its roofline B tokens per
// weight read (B times the one-sequence weight roofline at depth 0).
TEST(RunBench, LockstepBatchRows) {
  const std::string path = test::temp_dir() + "/bench-batch.gguf";
  BenchOptions o = small_bench(path);
  o.prompt_sizes = {};
  o.n_gen = 4;
  o.batch_sizes = {1, 3};
  auto r = run_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.message();
  std::map<std::string, Figure> by_name;
  for (const Figure& f : r->figures) by_name[f.test] = f;
  for (const char* name : {"tg4 x 1", "tg4 x 3"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].value.n, 2) << name;
    EXPECT_GT(by_name[name].value.mean, 0) << name;
  }
  ASSERT_TRUE(by_name["tg4 x 1"].roofline && by_name["tg4 x 3"].roofline);
  EXPECT_NEAR(*by_name["tg4 x 3"].roofline, 3 * *by_name["tg4 x 1"].roofline,
              1e-6 * *by_name["tg4 x 3"].roofline);
}

// The lockstep rows' caches hold a copy of the filled depth, not unwritten rows (those all read
// the kernel's one shared zero page: the eight-sequence row of kjv-13m ran 2x slower on an AMD
// EPYC than over the same positions written): every row of every cache equals the filled one's.
TEST(BatchDecode, CachesHoldTheFilledDepth) {
  const std::string path = test::temp_dir() + "/bench-batch-depth.gguf";
  SyntheticSpec spec{{"test-small", 256, 512, 2, 4, 2, 300, 128, 10000.0}, DType::Q8_0};
  ASSERT_TRUE(write_synthetic_gguf(spec, path).is_ok());
  LoadOptions opt;
  opt.n_threads = 1;
  opt.use_weight_cache = false;
  auto m = load_model(path, opt);
  ASSERT_TRUE(m.is_ok()) << m.message();
  constexpr int64_t kCapacity = 40, kDepth = 21;
  const KvCacheTypes types{DType::F16, DType::Q8_0};
  auto filled = (*m)->new_kv_cache(kCapacity, types);
  ASSERT_TRUE(filled.is_ok());
  ForwardScratch scratch;
  std::vector<float> logits;
  std::vector<int32_t> prompt;
  for (int i = 0; i < kDepth; ++i) prompt.push_back(1 + 7 * i % 290);
  ASSERT_TRUE((*m)->prefill(*filled, prompt, scratch, &logits).is_ok());
  std::vector<uint8_t> want;
  ASSERT_TRUE(filled->save(kDepth, &want).is_ok());
  auto batch = new_batch_caches(**m, 3, kCapacity, types, *filled, kDepth);
  ASSERT_TRUE(batch.is_ok()) << batch.message();
  ASSERT_EQ(batch->size(), 3u);
  for (KvCache& kv : *batch) {
    EXPECT_EQ(kv.used(), kDepth);
    std::vector<uint8_t> got;
    ASSERT_TRUE(kv.save(kDepth, &got).is_ok());
    EXPECT_EQ(got, want);
  }
  // A depth run of the row itself: the caches go on from there.
  auto tok_s = batch_decode_tok_s(**m, *batch, 2, kDepth, scratch);
  ASSERT_TRUE(tok_s.is_ok()) << tok_s.message();
  EXPECT_GT(*tok_s, 0);
  std::filesystem::remove(path);
}

TEST(Report, StatsAndFormats) {
  const Stat s = Stat::of({1.0, 2.0, 3.0});
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.sd, 1.0);
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(Stat::of({5.0}).sd, 0.0);

  BenchReport r;
  r.model = "m.gguf";
  r.model_type = "Q4_0";
  r.threads = 2;
  r.kernel_isa = "avx512";
  DeviceReport cpu;
  cpu.backend = "cpu";
  cpu.name = "test cpu";
  cpu.bandwidth_gbs = 50;
  r.devices.push_back(cpu);
  r.figures.push_back({"tg128", "tok/s", Stat::of({40, 44}), 50.0, "bandwidth", std::nullopt});
  r.figures.push_back({"load warm", "ms", Stat::of({12}), std::nullopt, "", std::nullopt});
  EXPECT_DOUBLE_EQ(*r.figures[0].pct_of_roofline(), 84.0);
  EXPECT_FALSE(r.figures[1].pct_of_roofline());

  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| tg128 | 42.00 ± 2.83 tok/s | 50.00 tok/s | 84% | bandwidth | n/a |"),
            std::string::npos)
      << md;
  const auto j = nlohmann::json::parse(render_json(r));
  EXPECT_EQ(j["figures"][0]["test"], "tg128");
  EXPECT_DOUBLE_EQ(j["figures"][0]["pct_of_roofline"].get<double>(), 84.0);
  EXPECT_TRUE(j["figures"][0]["joules_per_token"].is_null());
  EXPECT_EQ(j["devices"][0]["bandwidth_gbs"], 50);
  const std::string csv = render_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header + 2 figures
  EXPECT_NE(csv.find("m.gguf,Q4_0,2,avx512,tg128,tok/s,42.0000,"), std::string::npos) << csv;
}

TEST(Probes, ReturnSaneValues) {
  EXPECT_GT(measure_read_bandwidth(2, 64u << 20, 1), 0.1);
  const PeakCompute p = measure_peak_compute(1, kernels::active_kernel_table().name);
  EXPECT_GT(p.f32_gflops, 0.1);
  EXPECT_FALSE(p.isa.empty());
  // Each x86 table is measured with its own instructions (int8 wherever it has VNNI).
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx2 && cpu.fma) {
    EXPECT_EQ(measure_peak_compute(1, "avx2").isa, "avx2");
    EXPECT_EQ(measure_peak_compute(1, "avx2").int8_gops, 0.0);
  }
  if (cpu.avx2 && cpu.fma && cpu.avx_vnni) {
    const PeakCompute v = measure_peak_compute(1, "avx-vnni");
    EXPECT_EQ(v.isa, "avx-vnni");
    EXPECT_GT(v.int8_gops, 0.1);
  }
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512_vnni) {
    const PeakCompute w = measure_peak_compute(1, "avx512");
    EXPECT_EQ(w.isa, "avx512");
    EXPECT_GT(w.int8_gops, 0.1);
  }
  EXPECT_GT(current_rss_bytes(), 0u);
  // Read the current value first: RSS may grow between the two reads, the peak never shrinks.
  const uint64_t current = current_rss_bytes();
  EXPECT_GE(peak_rss_bytes(), current);
  const EnergyReading e = read_energy();
  if (e.joules) {
    EXPECT_GE(*e.joules, 0.0);
  }
  EXPECT_FALSE(energy_delta_j(EnergyReading{}, e).has_value());
  const std::string f = test::temp_dir() + "/drop-me";
  std::ofstream(f) << "data";
  EXPECT_EQ(drop_file_cache(f, /*allow_drop_caches=*/false), "fadvise");
  EXPECT_EQ(drop_file_cache(f + ".missing", false), "none");
  // Pages mapped by a live process stay resident: mincore sees it, and without the system-wide
  // drop the file is reported as not dropped rather than as dropped.
  {
    auto mapped = MappedFile::open(f);
    ASSERT_TRUE(mapped.is_ok()) << mapped.message();
    volatile uint8_t touch = mapped->data()[0];
    (void)touch;
    EXPECT_EQ(drop_file_cache(f, false), "none");
  }
  EXPECT_EQ(drop_file_cache(f, false), "fadvise");
}

}  // namespace
}  // namespace hearth::bench
