// Every C API call with bad arguments: null handles and pointers, bad sizes, bad paths, token ids
// outside the vocabulary, cancelled loads. Each must return an error code and a message.
#include <cstddef>
#include <cstring>

#include "api-test-util.h"

namespace hearth::test {
namespace {

// The call failed with `code` and left a message naming itself.
#define EXPECT_FAILS(call, code, name)                                                 \
  do {                                                                                 \
    const hearth_status s_ = (call);                                                   \
    EXPECT_EQ(s_, (code)) << hearth_status_name(s_) << ": " << hearth_last_error();    \
    EXPECT_NE(std::strstr(hearth_last_error(), name), nullptr) << hearth_last_error(); \
  } while (0)

TEST(ApiBadArgs, NullModelHandle) {
  int32_t ids[4];
  char text[16];
  float emb[4];
  size_t n = 0;
  int32_t flag = 0;
  hearth_model_info info{};
  info.struct_size = sizeof info;
  EXPECT_FAILS(hearth_model_get_info(nullptr, &info), HEARTH_ERR_INVALID_ARGUMENT, "get_info");
  EXPECT_FAILS(hearth_tokenize(nullptr, "a", 1, 0, ids, 4, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "hearth_tokenize");
  EXPECT_FAILS(hearth_detokenize(nullptr, ids, 0, 0, text, 16, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "hearth_detokenize");
  EXPECT_FAILS(hearth_token_to_piece(nullptr, 1, text, 16, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "to_piece");
  EXPECT_FAILS(hearth_token_is_end(nullptr, 1, &flag), HEARTH_ERR_INVALID_ARGUMENT, "is_end");
  EXPECT_FAILS(hearth_embed(nullptr, ids, 1, emb, 4, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "hearth_embed");
  hearth_session* s = reinterpret_cast<hearth_session*>(0x1);
  EXPECT_FAILS(hearth_session_create(nullptr, nullptr, &s), HEARTH_ERR_INVALID_ARGUMENT,
               "session_create");
  EXPECT_EQ(s, nullptr);  // outputs are cleared on failure
  hearth_chat_message m{"user", "hi"};
  EXPECT_FAILS(hearth_chat_render(nullptr, nullptr, &m, 1, 1, text, 16, &n),
               HEARTH_ERR_INVALID_ARGUMENT, "chat_render");
  hearth_model_free(nullptr);  // a no-op, like free(NULL)
}

TEST(ApiBadArgs, NullSessionHandle) {
  int32_t ids[4] = {1, 2, 3, 4};
  int32_t tok = 0;
  const float* logits = nullptr;
  size_t n = 0;
  unsigned char blob[64] = {};
  hearth_sampling_params sp;
  ASSERT_EQ(hearth_sampling_params_init(&sp, sizeof sp), HEARTH_OK);
  EXPECT_FAILS(hearth_session_set_sampling(nullptr, &sp), HEARTH_ERR_INVALID_ARGUMENT,
               "set_sampling");
  EXPECT_FAILS(hearth_session_reset(nullptr), HEARTH_ERR_INVALID_ARGUMENT, "reset");
  EXPECT_FAILS(hearth_session_prefill(nullptr, ids, 4), HEARTH_ERR_INVALID_ARGUMENT, "prefill");
  EXPECT_FAILS(hearth_session_decode(nullptr, 1), HEARTH_ERR_INVALID_ARGUMENT, "decode");
  EXPECT_FAILS(hearth_session_sample(nullptr, &tok), HEARTH_ERR_INVALID_ARGUMENT, "sample");
  EXPECT_FAILS(hearth_session_logits(nullptr, &logits, &n), HEARTH_ERR_INVALID_ARGUMENT, "logits");
  EXPECT_FAILS(hearth_session_history(nullptr, ids, 4, &n), HEARTH_ERR_INVALID_ARGUMENT, "history");
  EXPECT_FAILS(hearth_session_generate(nullptr, ids, 4, nullptr, nullptr, nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "generate");
  EXPECT_FAILS(hearth_session_state_save(nullptr, blob, 64, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "state_save");
  EXPECT_FAILS(hearth_session_state_load(nullptr, blob, 64), HEARTH_ERR_INVALID_ARGUMENT,
               "state_load");
  hearth_session_free(nullptr);
}

TEST(ApiBadArgs, BadPathsAndRepoIds) {
  hearth_model* m = reinterpret_cast<hearth_model*>(0x1);
  EXPECT_FAILS(hearth_model_load(nullptr, nullptr, &m), HEARTH_ERR_INVALID_ARGUMENT, "load");
  EXPECT_EQ(m, nullptr);
  EXPECT_FAILS(hearth_model_load("", nullptr, &m), HEARTH_ERR_INVALID_ARGUMENT, "load");
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_FAILS(hearth_model_load("/no/such/model.gguf", nullptr, &m), HEARTH_ERR_NOT_FOUND,
               "/no/such/model.gguf");
  // Not a path and not a valid repo id.
  EXPECT_FAILS(hearth_model_load("not..a/repo--id", nullptr, &m), HEARTH_ERR_NOT_FOUND,
               "not..a/repo--id");
  // A file that is not a model.
  const std::string junk = temp_dir() + "/junk.gguf";
  write_file(junk, "this is not a gguf file at all");
  EXPECT_FAILS(hearth_model_load(junk.c_str(), nullptr, &m), HEARTH_ERR_FAILED, "junk.gguf");
  EXPECT_EQ(m, nullptr);
  // A directory without a model in it.
  EXPECT_FAILS(hearth_model_load(temp_dir().c_str(), nullptr, &m), HEARTH_ERR_FAILED,
               "hearth_model_load");
}

TEST(ApiBadArgs, BadParamStructs) {
  hearth_model_params mp;
  EXPECT_FAILS(hearth_model_params_init(nullptr, sizeof mp), HEARTH_ERR_INVALID_ARGUMENT, "init");
  EXPECT_FAILS(hearth_model_params_init(&mp, 4), HEARTH_ERR_INVALID_ARGUMENT, "struct_size");
  ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
  mp.struct_size = 0;  // forgot the init call's size
  hearth_model* m = nullptr;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "struct_size");
  ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
  mp.gpu_layers = -7;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "gpu_layers");
  mp.gpu_layers = 0;
  mp.n_threads = -1;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "n_threads");

  hearth_sampling_params sp;
  ASSERT_EQ(hearth_sampling_params_init(&sp, sizeof sp), HEARTH_OK);
  sp.temperature = std::numeric_limits<float>::quiet_NaN();
  hearth_session_params p;
  ASSERT_EQ(hearth_session_params_init(&p, sizeof p), HEARTH_OK);
  p.sampling = &sp;
  hearth_session* s = nullptr;
  EXPECT_FAILS(hearth_session_create(tiny_model(), &p, &s), HEARTH_ERR_INVALID_ARGUMENT, "NaN");
  p.sampling = nullptr;
  p.n_ctx = -5;
  EXPECT_FAILS(hearth_session_create(tiny_model(), &p, &s), HEARTH_ERR_INVALID_ARGUMENT, "n_ctx");
  EXPECT_FAILS(hearth_session_create(tiny_model(), &p, nullptr), HEARTH_ERR_INVALID_ARGUMENT,
               "out is NULL");

  hearth_model_info info{};
  info.struct_size = 3;
  EXPECT_FAILS(hearth_model_get_info(tiny_model(), &info), HEARTH_ERR_INVALID_ARGUMENT,
               "struct_size");
  EXPECT_FAILS(hearth_model_get_info(tiny_model(), nullptr), HEARTH_ERR_INVALID_ARGUMENT,
               "out is NULL");
}

// A newer app's larger struct: the library fills what it knows and zeroes the rest.
TEST(ApiBadArgs, LargerStructFromANewerHeaderIsAccepted) {
  struct Newer {
    hearth_sampling_params base;
    int64_t future_field;
  } newer;
  newer.future_field = 77;
  ASSERT_EQ(hearth_sampling_params_init(&newer.base, sizeof newer), HEARTH_OK);
  EXPECT_EQ(newer.base.struct_size, sizeof newer);
  EXPECT_EQ(newer.future_field, 0);
  hearth_session_params p;
  ASSERT_EQ(hearth_session_params_init(&p, sizeof p), HEARTH_OK);
  p.sampling = &newer.base;
  hearth_session* s = nullptr;
  ASSERT_EQ(hearth_session_create(tiny_model(), &p, &s), HEARTH_OK) << hearth_last_error();
  hearth_session_free(s);
}

// An app built against the v1 header (no backend-choice fields) still loads, with their
// defaults; the fields themselves reach the load and bad values are named.
TEST(ApiBadArgs, OlderModelParamsAndBackendChoices) {
  const size_t v1 = offsetof(hearth_model_params, no_weight_cache);
  hearth_model_params mp;
  std::memset(&mp, 0x5a, sizeof mp);  // what a v1 caller never writes
  ASSERT_EQ(hearth_model_params_init(&mp, v1), HEARTH_OK) << hearth_last_error();
  EXPECT_EQ(mp.struct_size, v1);
  EXPECT_EQ(mp.gpu_layers, 0);
  hearth_model* m = nullptr;
  ASSERT_EQ(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_OK) << hearth_last_error();
  hearth_model_free(m);
  EXPECT_FAILS(hearth_model_params_init(&mp, v1 - 1), HEARTH_ERR_INVALID_ARGUMENT, "struct_size");

  ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
  EXPECT_EQ(mp.cache_verify, HEARTH_CACHE_VERIFY_LAZY);
  EXPECT_EQ(mp.cuda_chain_depth, 3);
  const int32_t default_decode_lanes = mp.decode_lanes;
  mp.no_weight_cache = 1;
  mp.cache_verify = HEARTH_CACHE_VERIFY_FULL;
  mp.no_amx = 1;
  mp.no_cuda_graphs = 1;
  mp.cuda_chain_depth = 0;
  ASSERT_EQ(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_OK) << hearth_last_error();
  hearth_model_free(m);
  mp.cache_verify = 3;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "cache_verify");
  mp.cache_verify = HEARTH_CACHE_VERIFY_LAZY;
  mp.cuda_chain_depth = 9;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "cuda_chain_depth");
  mp.cuda_chain_depth = 3;
  mp.amx_min_tokens = -1;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "amx min tokens");
  mp.amx_min_tokens = 0;
  EXPECT_EQ(default_decode_lanes, HEARTH_DECODE_LANES_AUTO);
  mp.decode_lanes = HEARTH_DECODE_LANES_ON;
  ASSERT_EQ(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_OK) << hearth_last_error();
  hearth_model_free(m);
  mp.decode_lanes = 3;
  EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_INVALID_ARGUMENT,
               "decode_lanes");
}

// The KV cache types: defaults f16 (also for a v1-size struct, which ends at `sampling`), the
// four types accepted, anything else named; q8_0 on a head size that is not whole blocks fails
// the creation with a message saying so (phi3-tiny: 16).
TEST(ApiBadArgs, SessionCacheTypes) {
  const size_t v1 = offsetof(hearth_session_params, cache_type_k);
  hearth_session_params p;
  std::memset(&p, 0x5a, sizeof p);  // what a v1 caller never writes
  ASSERT_EQ(hearth_session_params_init(&p, v1), HEARTH_OK) << hearth_last_error();
  EXPECT_EQ(p.struct_size, v1);
  hearth_session_params full;
  ASSERT_EQ(hearth_session_params_init(&full, sizeof full), HEARTH_OK);
  EXPECT_EQ(full.cache_type_k, HEARTH_CACHE_TYPE_F16);
  EXPECT_EQ(full.cache_type_v, HEARTH_CACHE_TYPE_F16);
  hearth_session* s = nullptr;
  p.n_ctx = 32;
  p.sampling = nullptr;
  ASSERT_EQ(hearth_session_create(tiny_model(), &p, &s), HEARTH_OK) << hearth_last_error();
  hearth_session_free(s);
  for (int32_t t : {HEARTH_CACHE_TYPE_F32, HEARTH_CACHE_TYPE_F16, HEARTH_CACHE_TYPE_BF16,
                    HEARTH_CACHE_TYPE_Q8_0}) {
    full.n_ctx = 32;
    full.cache_type_k = t;
    full.cache_type_v = t;
    ASSERT_EQ(hearth_session_create(tiny_model(), &full, &s), HEARTH_OK) << hearth_last_error();
    hearth_session_free(s);
  }
  full.cache_type_k = 2;  // Q4_0: a ggml type, not a cache type
  EXPECT_FAILS(hearth_session_create(tiny_model(), &full, &s), HEARTH_ERR_INVALID_ARGUMENT,
               "cache_type_k = 2 is not a cache type");
  full.cache_type_k = HEARTH_CACHE_TYPE_F16;
  full.cache_type_v = -1;
  EXPECT_FAILS(hearth_session_create(tiny_model(), &full, &s), HEARTH_ERR_INVALID_ARGUMENT,
               "cache_type_v");
  hearth_model* phi = nullptr;
  ASSERT_EQ(hearth_model_load(shared_path("goldens/phi3-tiny").c_str(), nullptr, &phi), HEARTH_OK)
      << hearth_last_error();
  full.cache_type_v = HEARTH_CACHE_TYPE_Q8_0;
  EXPECT_FAILS(hearth_session_create(phi, &full, &s), HEARTH_ERR_INVALID_ARGUMENT,
               "q8_0 needs a head_dim that is a multiple of 32");
  hearth_model_free(phi);
}

TEST(ApiBadArgs, CancelledLoads) {
  for (int cancel_at : {1, 2, 4}) {
    struct Ctx {
      int calls = 0;
      int cancel_at = 0;
    } ctx{0, cancel_at};
    hearth_model_params mp;
    ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
    mp.progress = [](float, void* ud) -> int32_t {
      auto* c = static_cast<Ctx*>(ud);
      return ++c->calls < c->cancel_at ? 1 : 0;
    };
    mp.progress_user_data = &ctx;
    hearth_model* m = reinterpret_cast<hearth_model*>(0x1);
    EXPECT_FAILS(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_ERR_CANCELLED,
                 "cancelled");
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(ctx.calls, cancel_at);  // no further progress after cancelling
  }
}

TEST(ApiBadArgs, ProgressReachesOneOnASuccessfulLoad) {
  std::vector<float> seen;
  hearth_model_params mp;
  ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
  mp.progress = [](float f, void* ud) -> int32_t {
    static_cast<std::vector<float>*>(ud)->push_back(f);
    return 1;
  };
  mp.progress_user_data = &seen;
  hearth_model* m = nullptr;
  ASSERT_EQ(hearth_model_load(tiny_gguf().c_str(), &mp, &m), HEARTH_OK) << hearth_last_error();
  EXPECT_STREQ(hearth_last_error(), "");
  ASSERT_GE(seen.size(), 2u);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i], seen[i - 1]);
  EXPECT_FLOAT_EQ(seen.back(), 1.0f);
  hearth_model_free(m);
}

TEST(ApiBadArgs, BadTokensAndBuffers) {
  hearth_model* m = tiny_model();
  ASSERT_NE(m, nullptr);
  size_t n = 0;
  int32_t flag = 0;
  char text[8];
  float emb[8];
  const int32_t bad[] = {1, 32000};
  const int32_t neg[] = {-3};
  EXPECT_FAILS(hearth_tokenize(m, nullptr, 5, 0, nullptr, 0, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "text is NULL");
  EXPECT_FAILS(hearth_tokenize(m, "abc", 3, 0, nullptr, 4, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "tokens is NULL");
  EXPECT_FAILS(hearth_tokenize(m, "abc", 3, 0, nullptr, 0, nullptr), HEARTH_ERR_INVALID_ARGUMENT,
               "n_tokens");
  EXPECT_FAILS(hearth_detokenize(m, bad, 2, 0, text, 8, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "tokens[1] = 32000");
  EXPECT_FAILS(hearth_detokenize(m, nullptr, 2, 0, text, 8, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "tokens is NULL");
  EXPECT_FAILS(hearth_token_to_piece(m, -1, text, 8, &n), HEARTH_ERR_INVALID_ARGUMENT, "-1");
  EXPECT_FAILS(hearth_token_is_end(m, 99999, &flag), HEARTH_ERR_INVALID_ARGUMENT, "99999");
  EXPECT_FAILS(hearth_token_is_end(m, 2, nullptr), HEARTH_ERR_INVALID_ARGUMENT, "is_end");
  EXPECT_FAILS(hearth_embed(m, neg, 1, emb, 8, &n), HEARTH_ERR_BUFFER_TOO_SMALL, "hearth_embed");
  EXPECT_EQ(n, 96u);  // the size to retry with (llama2-tiny: n_embd 96)
  EXPECT_FAILS(hearth_embed(m, nullptr, 0, emb, 8, &n), HEARTH_ERR_INVALID_ARGUMENT, "no tokens");
  std::vector<float> big(96);
  EXPECT_FAILS(hearth_embed(m, neg, 1, big.data(), big.size(), &n), HEARTH_ERR_INVALID_ARGUMENT,
               "tokens[0] = -3");

  // Buffers too small report the size needed; text needs room for the NUL.
  const char* hello = "Hello world, this is a test";
  EXPECT_FAILS(
      hearth_tokenize(m, hello, std::strlen(hello), HEARTH_TOKENIZE_ADD_SPECIAL, nullptr, 0, &n),
      HEARTH_ERR_BUFFER_TOO_SMALL, "needs room");
  EXPECT_GT(n, 3u);
  const int32_t world[] = {3186};
  size_t len = 0;
  EXPECT_FAILS(hearth_token_to_piece(m, world[0], text, 1, &len), HEARTH_ERR_BUFFER_TOO_SMALL,
               "bytes");
  ASSERT_LT(len, sizeof text);
  EXPECT_EQ(hearth_token_to_piece(m, world[0], text, len + 1, &len), HEARTH_OK);
  EXPECT_EQ(text[len], '\0');
}

TEST(ApiBadArgs, SessionMisuse) {
  hearth_session* s = new_session(tiny_model(), /*n_ctx=*/16);
  ASSERT_NE(s, nullptr);
  int32_t tok = 0;
  const float* logits = nullptr;
  size_t n = 0;
  // Nothing evaluated yet.
  EXPECT_FAILS(hearth_session_sample(s, &tok), HEARTH_ERR_BAD_STATE, "empty");
  EXPECT_FAILS(hearth_session_logits(s, &logits, &n), HEARTH_ERR_BAD_STATE, "empty");
  EXPECT_FAILS(hearth_session_generate(s, nullptr, 0, nullptr, nullptr, nullptr, nullptr),
               HEARTH_ERR_BAD_STATE, "empty");
  EXPECT_FAILS(hearth_session_prefill(s, nullptr, 3), HEARTH_ERR_INVALID_ARGUMENT, "no tokens");
  const int32_t bad[] = {1, 40000};
  EXPECT_FAILS(hearth_session_prefill(s, bad, 2), HEARTH_ERR_INVALID_ARGUMENT, "40000");
  EXPECT_FAILS(hearth_session_decode(s, -2), HEARTH_ERR_INVALID_ARGUMENT, "-2");
  EXPECT_FAILS(hearth_session_generate(s, bad, 2, nullptr, nullptr, nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "40000");
  // Too long for the context of 16.
  std::vector<int32_t> long_prompt(17, 100);
  EXPECT_FAILS(hearth_session_prefill(s, long_prompt.data(), long_prompt.size()),
               HEARTH_ERR_CONTEXT_FULL, "context");
  // Bad generate params.
  hearth_generate_params gp;
  ASSERT_EQ(hearth_generate_params_init(&gp, sizeof gp), HEARTH_OK);
  gp.n_stop = 2;
  const int32_t ok_prompt[] = {1, 100};
  EXPECT_FAILS(hearth_session_generate(s, ok_prompt, 2, &gp, nullptr, nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "stop");
  const char* stops[] = {"x", ""};
  gp.stop = stops;
  EXPECT_FAILS(hearth_session_generate(s, ok_prompt, 2, &gp, nullptr, nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "stop[1]");
  gp.n_stop = 0;
  gp.max_tokens = -9;
  EXPECT_FAILS(hearth_session_generate(s, ok_prompt, 2, &gp, nullptr, nullptr, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "max_tokens");
  hearth_generate_result r{};
  EXPECT_FAILS(hearth_session_generate(s, ok_prompt, 2, nullptr, nullptr, nullptr, &r),
               HEARTH_ERR_INVALID_ARGUMENT, "struct_size");
  // Failed calls left the session usable and empty.
  EXPECT_EQ(hearth_session_history(s, nullptr, 0, &n), HEARTH_OK);
  EXPECT_EQ(n, 0u);
  // Filling the context exactly, then one more token.
  std::vector<int32_t> full(16, 100);
  full[0] = 1;
  ASSERT_EQ(hearth_session_prefill(s, full.data(), full.size()), HEARTH_OK) << hearth_last_error();
  EXPECT_FAILS(hearth_session_decode(s, 100), HEARTH_ERR_CONTEXT_FULL, "context");
  // State blobs: garbage, truncated.
  unsigned char junk[100] = {};
  EXPECT_FAILS(hearth_session_state_load(s, junk, sizeof junk), HEARTH_ERR_BAD_STATE, "magic");
  EXPECT_FAILS(hearth_session_state_load(s, nullptr, 10), HEARTH_ERR_INVALID_ARGUMENT, "buffer");
  EXPECT_FAILS(hearth_session_state_save(s, nullptr, 10, &n), HEARTH_ERR_INVALID_ARGUMENT,
               "buffer");
  EXPECT_FAILS(hearth_session_set_sampling(s, nullptr), HEARTH_ERR_INVALID_ARGUMENT, "params");
  hearth_session_free(s);
}

TEST(ApiBadArgs, ChatRenderErrors) {
  size_t n = 0;
  char buf[64];
  hearth_chat_message bad{"user", nullptr};
  EXPECT_FAILS(hearth_chat_render(nullptr, "chatml", &bad, 1, 1, buf, 64, &n),
               HEARTH_ERR_INVALID_ARGUMENT, "messages[0]");
  EXPECT_FAILS(hearth_chat_render(nullptr, "chatml", nullptr, 2, 1, buf, 64, &n),
               HEARTH_ERR_INVALID_ARGUMENT, "messages is NULL");
  hearth_chat_message ok{"user", "hi"};
  EXPECT_FAILS(hearth_chat_render(nullptr, "{% if %}", &ok, 1, 1, buf, 64, &n), HEARTH_ERR_FAILED,
               "hearth_chat_render");
  EXPECT_FAILS(
      hearth_chat_render(nullptr, "{{ raise_exception('no tools') }}", &ok, 1, 1, buf, 64, &n),
      HEARTH_ERR_FAILED, "no tools");
  EXPECT_FAILS(hearth_chat_render(nullptr, "chatml", &ok, 1, 1, buf, 64, nullptr),
               HEARTH_ERR_INVALID_ARGUMENT, "length");
}

TEST(ApiBadArgs, StatusNamesAndVersion) {
  EXPECT_STREQ(hearth_status_name(HEARTH_ERR_CANCELLED), "HEARTH_ERR_CANCELLED");
  EXPECT_STREQ(hearth_status_name(12345), "HEARTH_ERR_UNKNOWN");
  EXPECT_STREQ(hearth_version(), HEARTH_TEST_PROJECT_VERSION);
  const std::string header_version = std::to_string(HEARTH_VERSION_MAJOR) + "." +
                                     std::to_string(HEARTH_VERSION_MINOR) + "." +
                                     std::to_string(HEARTH_VERSION_PATCH);
  EXPECT_EQ(header_version, HEARTH_TEST_PROJECT_VERSION);
  EXPECT_EQ(hearth_abi_version(), uint32_t(HEARTH_ABI_VERSION));
}

}  // namespace
}  // namespace hearth::test
