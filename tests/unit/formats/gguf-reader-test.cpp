// GGUF reader on real files (every GGUF in ../shared/goldens and models/vocab) and writer ->
// reader round trips for every metadata type. Bad inputs live in gguf-bad-input-test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::shared_path;

struct GoldenGguf {
  const char* path;
  uint64_t n_tensors;
  uint64_t n_kv;
  std::map<DType, int> type_counts;
  std::vector<int64_t> embd_shape;  // token_embd.weight, outermost-first
  DType embd_type;
  std::vector<int64_t> attn_k_shape;  // blk.0.attn_k.weight
  bool has_output;                    // untied LM head
};

const std::vector<GoldenGguf>& golden_ggufs() {
  static const std::vector<GoldenGguf> v = {
      {"goldens/llama2-tiny/llama2-tiny-bf16.gguf",
       21,
       25,
       {{DType::BF16, 16}, {DType::F32, 5}},
       {32000, 96},
       DType::BF16,
       {96, 96},
       true},
      {"goldens/llama2-tiny/llama2-tiny-q8_0.gguf",
       21,
       25,
       {{DType::Q8_0, 16}, {DType::F32, 5}},
       {32000, 96},
       DType::Q8_0,
       {96, 96},
       true},
      {"goldens/llama3-tiny/llama3-tiny-bf16.gguf",
       21,
       25,
       {{DType::BF16, 15}, {DType::F32, 6}},
       {32000, 128},
       DType::BF16,
       {64, 128},
       false},
      {"goldens/llama3-tiny/llama3-tiny-q4_0.gguf",
       21,
       25,
       {{DType::F32, 6}, {DType::Q8_0, 1}, {DType::Q4_0, 14}},
       {32000, 128},
       DType::Q8_0,
       {64, 128},
       false},
      {"goldens/kjv-13m/kjv-13m-q4_0.gguf",
       56,
       26,
       {{DType::F32, 13}, {DType::Q6_K, 1}, {DType::Q4_0, 42}},
       {32000, 256},
       DType::Q6_K,
       {256, 256},
       false},
      {"goldens/kjv-13m/kjv-13m-q4_k_m.gguf",
       56,
       26,
       {{DType::F32, 13}, {DType::Q6_K, 5}, {DType::Q4_K, 38}},
       {32000, 256},
       DType::Q6_K,
       {256, 256},
       false},
      {"goldens/kjv-13m/kjv-13m-q8_0.gguf",
       56,
       26,
       {{DType::F32, 13}, {DType::Q8_0, 43}},
       {32000, 256},
       DType::Q8_0,
       {256, 256},
       false},
      {"goldens/llama-k256/llama-k256-q4_0.gguf",
       20,
       25,
       {{DType::F32, 5}, {DType::Q6_K, 1}, {DType::Q4_0, 14}},
       {32000, 256},
       DType::Q6_K,
       {128, 256},
       false},
      {"goldens/llama-k256/llama-k256-q4_k_m.gguf",
       20,
       25,
       {{DType::F32, 5}, {DType::Q6_K, 3}, {DType::Q4_K, 12}},
       {32000, 256},
       DType::Q6_K,
       {128, 256},
       false},
      {"goldens/llama-k256/llama-k256-q5_k_m.gguf",
       20,
       25,
       {{DType::F32, 5}, {DType::Q6_K, 3}, {DType::Q5_K, 12}},
       {32000, 256},
       DType::Q6_K,
       {128, 256},
       false},
      {"goldens/llama-k256/llama-k256-q6_k.gguf",
       20,
       25,
       {{DType::F32, 5}, {DType::Q6_K, 15}},
       {32000, 256},
       DType::Q6_K,
       {128, 256},
       false},
      {"goldens/llama-k256/llama-k256-q8_0.gguf",
       20,
       25,
       {{DType::F32, 5}, {DType::Q8_0, 15}},
       {32000, 256},
       DType::Q8_0,
       {128, 256},
       false},
  };
  return v;
}

TEST(GgufReader, ReadsEveryGoldenModel) {
  for (const GoldenGguf& g : golden_ggufs()) {
    SCOPED_TRACE(g.path);
    auto f = GgufFile::open(shared_path(g.path));
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->data_offset() % 32, 0u);
    EXPECT_EQ(f->tensors().size(), g.n_tensors);
    EXPECT_EQ(f->metadata().size(), g.n_kv);
    auto arch = f->get_string("general.architecture");
    ASSERT_TRUE(arch.is_ok()) << arch.message();
    EXPECT_EQ(arch->value_or(""), "llama");

    std::map<DType, int> counts;
    const uint8_t* base = f->mapped()->data();
    const uint64_t size = f->mapped()->size();
    for (const TensorView& t : f->tensors()) {
      counts[t.dtype]++;
      // Zero-copy: every view lies inside the mapping, after the data section start.
      const auto* p = static_cast<const uint8_t*>(t.data);
      EXPECT_GE(p, base + f->data_offset()) << t.name;
      EXPECT_LE(p + t.nbytes, base + size) << t.name;
      EXPECT_EQ(uint64_t(p - base) % f->alignment(), 0u) << t.name;
      auto row = row_bytes(t.dtype, uint64_t(t.cols()));
      ASSERT_TRUE(row.has_value()) << t.name;
      EXPECT_EQ(t.nbytes, *row * uint64_t(t.rows())) << t.name;
    }
    EXPECT_EQ(counts, g.type_counts);

    const TensorView* embd = f->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->shape, g.embd_shape);
    EXPECT_EQ(embd->dtype, g.embd_type);
    const TensorView* k = f->find_tensor("blk.0.attn_k.weight");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->shape, g.attn_k_shape);
    EXPECT_EQ(f->find_tensor("output.weight") != nullptr, g.has_output);
    const TensorView* norm = f->find_tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->dtype, DType::F32);
    EXPECT_EQ(norm->shape, std::vector<int64_t>{g.embd_shape[1]});

    auto layers = f->get_int("llama.block_count");
    ASSERT_TRUE(layers.is_ok());
    ASSERT_TRUE(layers->has_value());
    EXPECT_EQ(f->find_tensor("blk." + std::to_string(**layers - 1) + ".ffn_down.weight") != nullptr,
              true);
    auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.is_ok()) << tokens.message();
    ASSERT_EQ(tokens->value().size(), 32000u);
    EXPECT_EQ(tokens->value()[1], "<s>");
  }
}

TEST(GgufReader, Llama3HasRopeFreqsAndScalars) {
  auto f = GgufFile::open(shared_path("goldens/llama3-tiny/llama3-tiny-bf16.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  const TensorView* rf = f->find_tensor("rope_freqs.weight");
  ASSERT_NE(rf, nullptr);
  EXPECT_EQ(rf->shape, std::vector<int64_t>{16});
  EXPECT_EQ(rf->dtype, DType::F32);
  EXPECT_EQ(f->get_float("llama.rope.freq_base")->value_or(0), 500000.0);
  EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon")->value_or(0), 1e-5, 1e-10);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv")->value_or(0), 2);
  EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token")->value_or(false), true);
  EXPECT_EQ(f->get_bool("tokenizer.ggml.add_eos_token")->value_or(true), false);
  auto scores = f->get_float_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.is_ok());
  EXPECT_EQ(scores->value().size(), 32000u);
  auto types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.is_ok());
  ASSERT_EQ(types->value().size(), 32000u);
  EXPECT_EQ(types->value()[0], 2);  // <unk> is UNKNOWN
  EXPECT_EQ(types->value()[1], 3);  // <s> is CONTROL
  // Absent keys are nullopt, wrong types are errors naming the key.
  EXPECT_FALSE(f->get_int("llama.no_such_key")->has_value());
  auto wrong = f->get_int("general.name");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.message().find("general.name"), std::string::npos) << wrong.message();
  EXPECT_NE(wrong.message().find("STRING"), std::string::npos) << wrong.message();
}

// The bf16 GGUF's embedding bytes must be exactly the safetensors checkpoint's: both are
// views into their mappings, so this checks offsets end to end.
TEST(GgufReader, TensorBytesMatchSafetensors) {
  auto g = GgufFile::open(shared_path("goldens/llama2-tiny/llama2-tiny-bf16.gguf"));
  ASSERT_TRUE(g.is_ok()) << g.message();
  auto st = SafetensorsCheckpoint::open_dir(shared_path("goldens/llama2-tiny"));
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::pair<const char*, const char*> pairs[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
      {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
  };
  for (auto [gname, hname] : pairs) {
    const TensorView* a = g->find_tensor(gname);
    const TensorView* b = st->find_tensor(hname);
    ASSERT_NE(a, nullptr) << gname;
    ASSERT_NE(b, nullptr) << hname;
    EXPECT_EQ(a->shape, b->shape) << gname;
    ASSERT_EQ(a->nbytes, b->nbytes) << gname;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << gname;
  }
}

TEST(GgufReader, ReadsVocabOnlyFiles) {
  auto spm = GgufFile::open(shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(spm.is_ok()) << spm.message();
  EXPECT_EQ(spm->tensors().size(), 0u);
  EXPECT_EQ(spm->metadata().size(), 22u);
  EXPECT_EQ(spm->get_string("general.architecture")->value_or(""), "llama");
  EXPECT_EQ(spm->get_string("tokenizer.ggml.model")->value_or(""), "llama");
  EXPECT_EQ(spm->get_int("tokenizer.ggml.unknown_token_id")->value_or(-1), 0);
  EXPECT_EQ(spm->get_string_array("tokenizer.ggml.tokens")->value().size(), 32000u);

  auto gpt2 = GgufFile::open(shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gpt2.is_ok()) << gpt2.message();
  EXPECT_EQ(gpt2->tensors().size(), 0u);
  EXPECT_EQ(gpt2->metadata().size(), 16u);
  EXPECT_EQ(gpt2->get_string("general.architecture")->value_or(""), "gpt2");
  EXPECT_EQ(gpt2->get_string("tokenizer.ggml.model")->value_or(""), "gpt2");
  auto merges = gpt2->get_string_array("tokenizer.ggml.merges");
  ASSERT_TRUE(merges.is_ok());
  EXPECT_EQ(merges->value().size(), 50000u);
}

GgufValue array_of(GgufType elem) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = elem;
  return v;
}

TEST(GgufWriter, RoundTripsEveryMetadataType) {
  GgufWriter w;
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -123456);
  w.set_u64("t.u64", 0xfedcba9876543210ull);
  w.set_f32("t.f32", 1.5f);
  w.set_bool("t.bool", true);
  w.set_string("t.string", std::string("h\xc3\xa9llo\0x", 8));  // UTF-8 and an embedded NUL
  w.set_string("t.empty", "");
  // The scalar types without a dedicated setter go through set_value.
  struct Scalar {
    const char* key;
    GgufType type;
    int64_t i;
    double f;
  };
  const Scalar scalars[] = {
      {"t.u8", GgufType::UINT8, 255, 0},        {"t.i8", GgufType::INT8, -128, 0},
      {"t.u16", GgufType::UINT16, 65535, 0},    {"t.i16", GgufType::INT16, -32768, 0},
      {"t.i64", GgufType::INT64, INT64_MIN, 0}, {"t.f64", GgufType::FLOAT64, 0, 1e-300},
  };
  for (const Scalar& s : scalars) {
    GgufValue v;
    v.type = s.type;
    v.i = s.i;
    v.u = uint64_t(s.i) & (s.type == GgufType::UINT8    ? 0xff
                           : s.type == GgufType::UINT16 ? 0xffff
                                                        : ~0ull);
    v.f = s.f;
    w.set_value(s.key, v);
  }
  w.set_string_array("a.strings", {"a", "", "long string"});
  w.set_f32_array("a.f32", {0.25f, -1.0f});
  w.set_i32_array("a.i32", {1, -2, 3});
  GgufValue bools = array_of(GgufType::BOOL);
  bools.ints = {1, 0, 1};
  w.set_value("a.bool", bools);
  GgufValue u8s = array_of(GgufType::UINT8);
  u8s.ints = {0, 200, 255};
  w.set_value("a.u8", u8s);
  GgufValue i64s = array_of(GgufType::INT64);
  i64s.ints = {INT64_MIN, 0, INT64_MAX};
  w.set_value("a.i64", i64s);
  GgufValue f64s = array_of(GgufType::FLOAT64);
  f64s.floats = {1e300, -0.5};
  w.set_value("a.f64", f64s);
  w.set_value("a.empty", array_of(GgufType::UINT16));
  // Nested: [[1, 2], [], [3]] of INT16, and [["x"], ["y", "z"]].
  GgufValue nested = array_of(GgufType::ARRAY);
  for (std::vector<int64_t> inner : {std::vector<int64_t>{1, 2}, {}, {3}}) {
    GgufValue a = array_of(GgufType::INT16);
    a.ints = inner;
    nested.items.push_back(a);
  }
  w.set_value("a.nested", nested);
  GgufValue nested_s = array_of(GgufType::ARRAY);
  for (std::vector<std::string> inner : {std::vector<std::string>{"x"}, {"y", "z"}}) {
    GgufValue a = array_of(GgufType::STRING);
    a.strings = inner;
    nested_s.items.push_back(a);
  }
  w.set_value("a.nested_strings", nested_s);
  w.set_u32("t.u32", 7);  // replacing keeps the key's position and count

  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "roundtrip.gguf");
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->metadata().size(), 23u);
  EXPECT_EQ(f->metadata()[0].first, "t.u32");
  EXPECT_EQ(f->get_int("t.u32")->value(), 7);
  EXPECT_EQ(f->find("t.u32")->type, GgufType::UINT32);
  EXPECT_EQ(f->get_int("t.i32")->value(), -123456);
  EXPECT_EQ(f->find("t.u64")->u, 0xfedcba9876543210ull);
  EXPECT_FALSE(f->get_int("t.u64").is_ok());  // does not fit int64: an error, not a wrap
  EXPECT_EQ(f->get_float("t.f32")->value(), 1.5);
  EXPECT_EQ(f->get_bool("t.bool")->value(), true);
  EXPECT_EQ(f->get_string("t.string")->value(), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(f->get_string("t.empty")->value(), "");
  EXPECT_EQ(f->get_int("t.u8")->value(), 255);
  EXPECT_EQ(f->get_int("t.i8")->value(), -128);
  EXPECT_EQ(f->get_int("t.u16")->value(), 65535);
  EXPECT_EQ(f->get_int("t.i16")->value(), -32768);
  EXPECT_EQ(f->get_int("t.i64")->value(), INT64_MIN);
  EXPECT_EQ(f->get_float("t.f64")->value(), 1e-300);
  for (const Scalar& s : scalars) EXPECT_EQ(f->find(s.key)->type, s.type) << s.key;

  EXPECT_EQ(f->get_string_array("a.strings")->value(),
            (std::vector<std::string>{"a", "", "long string"}));
  EXPECT_EQ(f->get_float_array("a.f32")->value(), (std::vector<double>{0.25, -1.0}));
  EXPECT_EQ(f->get_int_array("a.i32")->value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->get_int_array("a.bool")->value(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f->find("a.bool")->elem_type, GgufType::BOOL);
  EXPECT_EQ(f->get_int_array("a.u8")->value(), (std::vector<int64_t>{0, 200, 255}));
  EXPECT_EQ(f->get_int_array("a.i64")->value(), (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  EXPECT_EQ(f->get_float_array("a.f64")->value(), (std::vector<double>{1e300, -0.5}));
  EXPECT_EQ(f->find("a.empty")->array_size(), 0u);
  EXPECT_EQ(f->find("a.empty")->elem_type, GgufType::UINT16);

  const GgufValue* n = f->find("a.nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->elem_type, GgufType::ARRAY);
  ASSERT_EQ(n->array_size(), 3u);
  EXPECT_EQ(n->items[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->items[1].array_size(), 0u);
  EXPECT_EQ(n->items[2].ints, (std::vector<int64_t>{3}));
  EXPECT_EQ(n->items[2].elem_type, GgufType::INT16);
  const GgufValue* ns = f->find("a.nested_strings");
  ASSERT_NE(ns, nullptr);
  ASSERT_EQ(ns->items.size(), 2u);
  EXPECT_EQ(ns->items[1].strings, (std::vector<std::string>{"y", "z"}));

  // Wrong-type look-ups name the key.
  auto bad = f->get_string_array("a.i32");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("'a.i32'"), std::string::npos) << bad.message();
  EXPECT_FALSE(f->get_bool("t.u8").is_ok());
  EXPECT_FALSE(f->get_float("t.string").is_ok());

  // Writing what was read gives the same bytes (set_value copies arrays and nesting exactly).
  GgufWriter again;
  for (const auto& [k, v] : f->metadata()) again.set_value(k, v);
  EXPECT_EQ(again.to_bytes(), bytes);
}

TEST(GgufWriter, RoundTripsTensorsWithAlignment) {
  for (uint32_t alignment : {0u, 1u, 64u}) {  // 0: no general.alignment key, default 32
    SCOPED_TRACE(alignment);
    GgufWriter w;
    if (alignment) w.set_u32("general.alignment", alignment);
    std::vector<uint8_t> a(3 * 5 * 4), b(2 * 34), c(7 * 2);
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(100 + i);
    for (size_t i = 0; i < c.size(); ++i) c[i] = uint8_t(200 + i);
    w.add_tensor("a", DType::F32, {3, 5}, a);
    w.add_tensor("b.q8", DType::Q8_0, {2, 32}, b);  // 2 rows of one Q8_0 block (34 bytes)
    w.add_tensor_ref("c", DType::BF16, {1, 1, 7}, c.data(), c.size());
    ASSERT_TRUE(w.validate().is_ok()) << w.validate().message();
    const std::string path = test::temp_dir() + "/rt-" + std::to_string(alignment) + ".gguf";
    ASSERT_TRUE(w.write(path).is_ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    const uint64_t want_align = alignment ? alignment : 32;
    EXPECT_EQ(f->alignment(), want_align);
    EXPECT_EQ(f->data_offset() % want_align, 0u);
    ASSERT_EQ(f->tensors().size(), 3u);
    const TensorView* ta = f->find_tensor("a");
    const TensorView* tb = f->find_tensor("b.q8");
    const TensorView* tc = f->find_tensor("c");
    ASSERT_TRUE(ta && tb && tc);
    EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(tb->shape, (std::vector<int64_t>{2, 32}));
    EXPECT_EQ(tb->dtype, DType::Q8_0);
    EXPECT_EQ(tc->shape, (std::vector<int64_t>{1, 1, 7}));
    EXPECT_EQ(std::vector<uint8_t>((const uint8_t*)ta->data, (const uint8_t*)ta->data + 60), a);
    EXPECT_EQ(std::vector<uint8_t>((const uint8_t*)tb->data, (const uint8_t*)tb->data + 68), b);
    EXPECT_EQ(std::vector<uint8_t>((const uint8_t*)tc->data, (const uint8_t*)tc->data + 14), c);
    const std::string on_disk = test::read_file(path);  // write() streams what to_bytes() builds
    EXPECT_EQ(std::vector<uint8_t>(on_disk.begin(), on_disk.end()), w.to_bytes());
  }
}

TEST(GgufWriter, ValidateRefusesInconsistentTensors) {
  GgufWriter w;
  w.add_tensor("x", DType::F32, {2, 3}, std::vector<uint8_t>(20));
  auto s = w.validate();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("tensor 'x'"), std::string::npos) << s.message();
  EXPECT_FALSE(w.write(test::temp_dir() + "/never.gguf").is_ok());
  EXPECT_FALSE(test::read_file(test::temp_dir() + "/never.gguf").size());

  GgufWriter q;
  q.add_tensor("q", DType::Q4_0, {1, 33}, std::vector<uint8_t>(18));
  s = q.validate();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("block size"), std::string::npos) << s.message();

  GgufWriter d;
  d.add_tensor("t", DType::F32, {1}, std::vector<uint8_t>(4));
  d.add_tensor("t", DType::F32, {1}, std::vector<uint8_t>(4));
  EXPECT_NE(d.validate().message().find("duplicate"), std::string::npos);
}

}  // namespace
}  // namespace hearth
