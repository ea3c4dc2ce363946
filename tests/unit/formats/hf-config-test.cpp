// config.json / tokenizer_config.json: every golden's files, both RoPE spellings, defaults, and
// malformed input. A new field: a golden check here plus a wrong-type case.
#include <gtest/gtest.h>

#include "formats/hf-config.h"
#include "support/test-data.h"

namespace hearth {
namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

Result<HfConfig> golden_config(const std::string& model) {
  const std::string path = test::shared_path("goldens/" + model + "/config.json");
  const std::string text = test::read_file(path);
  EXPECT_FALSE(text.empty()) << path;
  return parse_hf_config(text, model + "/config.json");
}

TEST(HfConfig, Llama2Tiny) {
  auto c = golden_config("llama2-tiny");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_EQ(c->hidden_size, 96);
  EXPECT_EQ(c->intermediate_size, 256);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 3);
  EXPECT_EQ(c->num_key_value_heads, 3);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->hidden_act, "silu");
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 1.0);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_FALSE(c->sliding_window.has_value());
}

TEST(HfConfig, Llama3TinyHasLlama3RopeScaling) {
  auto c = golden_config("llama3-tiny");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 64);
}

TEST(HfConfig, OtherGoldens) {
  auto q = golden_config("qwen2-tiny");
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->model_type, "qwen2");
  EXPECT_EQ(q->architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  EXPECT_DOUBLE_EQ(q->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(q->rope.theta, 1e6);
  EXPECT_EQ(q->num_key_value_heads, 2);
  EXPECT_TRUE(q->tie_word_embeddings);

  auto k = golden_config("kjv-13m");
  ASSERT_TRUE(k.is_ok()) << k.message();
  EXPECT_EQ(k->hidden_size, 256);
  EXPECT_EQ(k->num_hidden_layers, 6);
  EXPECT_EQ(k->head_dim, 64);
  EXPECT_EQ(k->max_position_embeddings, 1024);
  EXPECT_TRUE(k->tie_word_embeddings);

  auto l = golden_config("llama-k256");
  ASSERT_TRUE(l.is_ok()) << l.message();
  EXPECT_EQ(l->num_key_value_heads, 2);
  EXPECT_EQ(l->head_dim, 64);
  EXPECT_EQ(l->rope.type, "default");
}

constexpr const char* kBase =
    R"("vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
       "num_hidden_layers": 2, "num_attention_heads": 8)";

Result<HfConfig> config_with(const std::string& extra) {
  return parse_hf_config(std::string("{") + kBase + (extra.empty() ? "" : ", " + extra) + "}",
                         "cfg/config.json");
}

TEST(HfConfig, Defaults) {
  auto c = config_with("");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->num_key_value_heads, 8);  // defaults to num_attention_heads
  EXPECT_EQ(c->head_dim, 8);             // hidden_size / num_attention_heads
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);

  auto nulls = config_with(R"("head_dim": null, "rope_scaling": null, "sliding_window": null,
                              "num_key_value_heads": null, "eos_token_id": null)");
  ASSERT_TRUE(nulls.is_ok()) << nulls.message();
  EXPECT_EQ(nulls->head_dim, 8);
  EXPECT_EQ(nulls->num_key_value_heads, 8);
}

// Gemma 3 4B's published config.json, abridged: a vision-language wrapper whose text_config
// lists only the sizes that differ from Gemma3TextConfig's defaults.
TEST(HfConfig, VisionLanguageWrapperReadsItsTextConfigWithClassDefaults) {
  auto c = parse_hf_config(R"({"architectures": ["Gemma3ForConditionalGeneration"],
      "model_type": "gemma3", "eos_token_id": [1, 106], "image_token_index": 262144,
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})",
                           "config.json");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->text_of, "gemma3");
  EXPECT_EQ(c->model_type, "gemma3_text");
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_hidden_layers, 34);
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->rope.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  // transformers' Gemma3TextConfig fills in the rest.
  EXPECT_EQ(c->vocab_size, 262208);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c->rope_local_base_freq, 10000.0);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));  // from the wrapper

  // A wrapper whose text_config names no model_type: the wrapper's text class.
  auto implied = parse_hf_config(
      R"({"model_type": "gemma3", "text_config": {"hidden_size": 64, "num_hidden_layers": 2}})",
      "config.json");
  ASSERT_TRUE(implied.is_ok()) << implied.message();
  EXPECT_EQ(implied->model_type, "gemma3_text");
  // Errors name the nested field.
  auto bad = parse_hf_config(
      R"({"model_type": "llava", "text_config": {"vocab_size": 8, "hidden_size": "big"}})",
      "config.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_HAS(bad.message(), "text_config.hidden_size");
  EXPECT_FALSE(parse_hf_config(R"({"model_type": "gemma3", "text_config": 7})", "c.json").is_ok());
}

TEST(HfConfig, ExplicitFields) {
  auto c =
      config_with(R"("head_dim": 16, "num_key_value_heads": 2, "eos_token_id": [128001, 128009],
                          "bos_token_id": 128000, "sliding_window": 4096, "attention_bias": true,
                          "dtype": "float16", "hidden_act": "gelu", "max_position_embeddings": 4096.0)");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128009}));
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{128000});
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->torch_dtype, "float16");
  EXPECT_EQ(c->hidden_act, "gelu");
  EXPECT_EQ(c->max_position_embeddings, 4096);  // integral float accepted
}

TEST(HfConfig, LegacyRopeScalingWithTypeKey) {
  auto c =
      config_with(R"("rope_theta": 1000000, "rope_scaling": {"type": "linear", "factor": 4.0})");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->rope.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
}

TEST(HfConfig, RopeParameters) {
  auto c = config_with(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
       "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
       "original_max_position_embeddings": 8192})");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);

  auto plain = config_with(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e6})");
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  EXPECT_EQ(plain->rope.type, "default");
  EXPECT_DOUBLE_EQ(plain->rope.theta, 1e6);

  auto per_kind = config_with(R"("rope_parameters": {
       "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
       "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})");
  ASSERT_TRUE(per_kind.is_ok()) << per_kind.message();
  EXPECT_EQ(per_kind->rope.type, "linear");
  EXPECT_DOUBLE_EQ(per_kind->rope.theta, 1e6);
}

TEST(HfConfig, MissingAndWrongFields) {
  auto missing = parse_hf_config(R"({"vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 128, "num_attention_heads": 8})",
                                 "m/config.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.message(), "m/config.json: num_hidden_layers: required field is missing");

  auto wrong = parse_hf_config(R"({"vocab_size": 100, "hidden_size": "64",
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8})",
                               "m/config.json");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.message(), "m/config.json: hidden_size: expected an integer, got a string");

  EXPECT_HAS(config_with(R"("rms_norm_eps": "tiny")").message(),
             "cfg/config.json: rms_norm_eps: expected a number, got a string");
  EXPECT_HAS(config_with(R"("tie_word_embeddings": 1)").message(),
             "tie_word_embeddings: expected a boolean, got an integer");
  EXPECT_HAS(config_with(R"("eos_token_id": "2")").message(),
             "eos_token_id: expected an integer or a list of integers");
  EXPECT_HAS(config_with(R"("eos_token_id": [2, "x"])").message(), "eos_token_id");
  EXPECT_HAS(config_with(R"("rope_scaling": {"rope_type": "llama3", "factor": "8"})").message(),
             "rope_scaling.factor: expected a number, got a string");
  EXPECT_HAS(config_with(R"("rope_scaling": {"rope_type": "linear", "factor": -2})").message(),
             "rope_scaling.factor: must be positive");
  EXPECT_HAS(config_with(R"("rope_scaling": "llama3")").message(),
             "rope_scaling: expected an object, got a string");
  EXPECT_HAS(config_with(R"("rope_parameters": {"rope_type": 3})").message(),
             "rope_parameters.rope_type: expected a string, got an integer");
  EXPECT_HAS(config_with(R"("num_key_value_heads": 3)").message(),
             "num_key_value_heads: 3 must be positive and divide num_attention_heads 8");
  EXPECT_HAS(config_with(R"("architectures": "LlamaForCausalLM")").message(),
             "architectures: expected a list of strings");
  EXPECT_HAS(config_with(R"("rope_theta": 0)").message(), "rope_theta: must be positive");
  EXPECT_HAS(parse_hf_config(R"({"vocab_size": 100, "hidden_size": 64, "intermediate_size": 1,
      "num_hidden_layers": -2, "num_attention_heads": 8})",
                             "m/config.json")
                 .message(),
             "num_hidden_layers: must be positive, got -2");
  EXPECT_HAS(parse_hf_config(R"({"vocab_size": 100, "hidden_size": 60, "intermediate_size": 1,
      "num_hidden_layers": 2, "num_attention_heads": 8})",
                             "m/config.json")
                 .message(),
             "head_dim: missing, and hidden_size 60 is not divisible");
}

TEST(HfConfig, MalformedJson) {
  for (const char* text : {"", "{", "{\"vocab_size\": 1,}", "not json", "{\"a\":\n\n tru}"}) {
    auto r = parse_hf_config(text, "bad/config.json");
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.message().rfind("bad/config.json: malformed JSON", 0), 0u) << r.message();
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  }
  auto arr = parse_hf_config("[1, 2]", "bad/config.json");
  EXPECT_EQ(arr.message(),
            "bad/config.json: expected a JSON object at the top level, got an array");
}

TEST(HfTokenizerConfig, Goldens) {
  for (const char* model : {"llama2-tiny", "llama3-tiny", "qwen2-tiny", "kjv-13m", "llama-k256"}) {
    SCOPED_TRACE(model);
    const std::string text = test::read_file(
        test::shared_path(std::string("goldens/") + model + "/tokenizer_config.json"));
    ASSERT_FALSE(text.empty());
    auto t = parse_hf_tokenizer_config(text, "tokenizer_config.json");
    ASSERT_TRUE(t.is_ok()) << t.message();
    EXPECT_EQ(t->add_bos_token, std::optional<bool>(true));
    EXPECT_EQ(t->add_eos_token, std::optional<bool>(false));
    EXPECT_EQ(t->bos_token, "<s>");
    EXPECT_EQ(t->eos_token, "</s>");
    EXPECT_EQ(t->unk_token, "<unk>");
    EXPECT_EQ(t->pad_token, "");
    EXPECT_EQ(t->tokenizer_class, "LlamaTokenizer");
    EXPECT_TRUE(t->chat_template.empty());
    const int64_t want_max = std::string(model) == "kjv-13m"      ? 1024
                             : std::string(model) == "llama-k256" ? 0
                                                                  : 2048;
    EXPECT_EQ(t->model_max_length, want_max);
  }
}

TEST(HfTokenizerConfig, ObjectTokensAndTemplateList) {
  auto t = parse_hf_tokenizer_config(R"({
      "bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": false},
      "eos_token": "<|eot_id|>", "pad_token": null,
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}],
      "model_max_length": 1000000000000000019884624838656,
      "tokenizer_class": "PreTrainedTokenizerFast"})",
                                     "t.json");
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->bos_token, "<|begin_of_text|>");
  EXPECT_EQ(t->eos_token, "<|eot_id|>");
  EXPECT_EQ(t->pad_token, "");
  EXPECT_EQ(t->chat_template, "D");
  EXPECT_EQ(t->model_max_length, 0);  // HF's "no limit" sentinel
  EXPECT_FALSE(t->add_bos_token.has_value());

  auto s = parse_hf_tokenizer_config(R"({"chat_template": "{{ messages }}"})", "t.json");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->chat_template, "{{ messages }}");
}

TEST(HfTokenizerConfig, WrongTypes) {
  EXPECT_EQ(parse_hf_tokenizer_config(R"({"add_bos_token": "yes"})", "t.json").message(),
            "t.json: add_bos_token: expected a boolean, got a string");
  EXPECT_HAS(parse_hf_tokenizer_config(R"({"bos_token": 1})", "t.json").message(),
             "t.json: bos_token: expected a string or an object");
  EXPECT_HAS(parse_hf_tokenizer_config(R"({"eos_token": {"lstrip": true}})", "t.json").message(),
             "t.json: eos_token.content: missing or not a string");
  EXPECT_HAS(parse_hf_tokenizer_config(R"({"chat_template": [{"name": 1}]})", "t.json").message(),
             "t.json: chat_template: list entries");
  EXPECT_HAS(parse_hf_tokenizer_config(R"({"chat_template": 5})", "t.json").message(),
             "t.json: chat_template: expected a string or a list");
  EXPECT_HAS(parse_hf_tokenizer_config(R"({"model_max_length": "big"})", "t.json").message(),
             "model_max_length: expected a number");
  EXPECT_HAS(parse_hf_tokenizer_config("{oops", "t.json").message(), "t.json: malformed JSON");
}

}  // namespace
}  // namespace hearth
