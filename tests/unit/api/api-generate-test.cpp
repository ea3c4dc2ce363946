// The C API against the llama2-tiny golden: greedy generation (streamed and step by step),
// logits, tokens, two sessions on two threads, KV state save/restore, repo ids from the cache.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "api-test-util.h"

namespace hearth::test {
namespace {

const char* kPromptText = "Once upon a time, in a land far away, there lived";

TEST(ApiGenerate, GreedyStreamReproducesGoldenGenIds) {
  const Golden& g = tiny_golden();
  hearth_session* s = new_session(tiny_model());
  ASSERT_NE(s, nullptr);
  hearth_generate_params gp;
  ASSERT_EQ(hearth_generate_params_init(&gp, sizeof gp), HEARTH_OK);
  gp.max_tokens = int32_t(g.gen_ids.size());
  gp.ignore_eos = 1;
  struct Seen {
    std::vector<int32_t> ids;
    std::string text;
  } seen;
  hearth_generate_result r{};
  r.struct_size = sizeof r;
  auto cb = [](int32_t token, const char* piece, size_t len, void* ud) -> int32_t {
    auto* s = static_cast<Seen*>(ud);
    EXPECT_EQ(std::strlen(piece), len);
    if (token >= 0) s->ids.push_back(token);
    s->text.append(piece, len);
    return 1;
  };
  ASSERT_EQ(
      hearth_session_generate(s, g.gen_prompt.data(), g.gen_prompt.size(), &gp, cb, &seen, &r),
      HEARTH_OK)
      << hearth_last_error();
  EXPECT_EQ(seen.ids, g.gen_ids);
  EXPECT_EQ(r.finish_reason, HEARTH_FINISH_LENGTH);
  EXPECT_EQ(r.n_generated, int32_t(g.gen_ids.size()));
  EXPECT_EQ(r.n_prompt_tokens, int32_t(g.gen_prompt.size()));
  // The streamed text is the detokenized ids.
  size_t len = 0;
  std::string text(4096, '\0');
  ASSERT_EQ(hearth_detokenize(tiny_model(), seen.ids.data(), seen.ids.size(), 0, text.data(),
                              text.size(), &len),
            HEARTH_OK);
  text.resize(len);
  EXPECT_EQ(seen.text, text);
  // The conversation holds prompt + generated ids.
  std::vector<int32_t> hist(128);
  size_t n = 0;
  ASSERT_EQ(hearth_session_history(s, hist.data(), hist.size(), &n), HEARTH_OK);
  hist.resize(n);
  std::vector<int32_t> want = g.gen_prompt;
  want.insert(want.end(), g.gen_ids.begin(), g.gen_ids.end());
  EXPECT_EQ(hist, want);
  hearth_session_free(s);
}

TEST(ApiGenerate, StepByStepMatchesGoldenAndLogits) {
  const Golden& g = tiny_golden();
  hearth_session* s = new_session(tiny_model());
  ASSERT_NE(s, nullptr);
  // Logits of the last input position against transformers.
  ASSERT_EQ(hearth_session_prefill(s, g.input_ids.data(), g.input_ids.size()), HEARTH_OK)
      << hearth_last_error();
  const float* logits = nullptr;
  size_t n_vocab = 0;
  ASSERT_EQ(hearth_session_logits(s, &logits, &n_vocab), HEARTH_OK);
  ASSERT_EQ(int64_t(n_vocab), g.n_vocab);
  const std::vector<float> last(logits, logits + n_vocab);
  const std::vector<float> ref(g.logits.end() - long(n_vocab), g.logits.end());
  EXPECT_LT(max_row_relative_error(last, ref, g.n_vocab), 1e-3);

  ASSERT_EQ(hearth_session_reset(s), HEARTH_OK);
  ASSERT_EQ(hearth_session_prefill(s, g.gen_prompt.data(), g.gen_prompt.size()), HEARTH_OK);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < g.gen_ids.size(); ++i) {
    int32_t t = -1;
    ASSERT_EQ(hearth_session_sample(s, &t), HEARTH_OK) << hearth_last_error();
    ids.push_back(t);
    ASSERT_EQ(hearth_session_decode(s, t), HEARTH_OK) << hearth_last_error();
  }
  EXPECT_EQ(ids, g.gen_ids);
  hearth_session_free(s);
}

// generate() then sample/decode continue the same greedy sequence (the pending last token).
TEST(ApiGenerate, GenerateThenStepContinues) {
  const Golden& g = tiny_golden();
  hearth_session* s = new_session(tiny_model());
  EXPECT_EQ(generate_ids(s, g.gen_prompt, 10), slice(g.gen_ids, 0, 10));
  std::vector<int32_t> ids;
  for (size_t i = 10; i < g.gen_ids.size(); ++i) {
    int32_t t = -1;
    ASSERT_EQ(hearth_session_sample(s, &t), HEARTH_OK) << hearth_last_error();
    ids.push_back(t);
    ASSERT_EQ(hearth_session_decode(s, t), HEARTH_OK) << hearth_last_error();
  }
  EXPECT_EQ(ids, slice(g.gen_ids, 10, g.gen_ids.size()));
  hearth_session_free(s);
}

TEST(ApiGenerate, CallbackCancelsAndStopStrings) {
  const Golden& g = tiny_golden();
  hearth_session* s = new_session(tiny_model());
  int calls = 0;
  auto cb = [](int32_t, const char*, size_t, void* ud) -> int32_t {
    return ++*static_cast<int*>(ud) < 3 ? 1 : 0;
  };
  hearth_generate_result r{};
  r.struct_size = sizeof r;
  ASSERT_EQ(
      hearth_session_generate(s, g.gen_prompt.data(), g.gen_prompt.size(), nullptr, cb, &calls, &r),
      HEARTH_OK);
  EXPECT_EQ(r.finish_reason, HEARTH_FINISH_CANCELLED);
  EXPECT_EQ(r.n_generated, 3);
  EXPECT_EQ(calls, 3);
  // A stop string taken from the golden continuation's text ends generation there.
  char piece[64];
  size_t len = 0;
  ASSERT_EQ(hearth_token_to_piece(tiny_model(), g.gen_ids[3], piece, sizeof piece, &len),
            HEARTH_OK);
  ASSERT_GT(len, 1u);
  const std::string stop(piece + 1, len - 1);  // without the SentencePiece space
  const char* stops[] = {stop.c_str()};
  hearth_generate_params gp;
  ASSERT_EQ(hearth_generate_params_init(&gp, sizeof gp), HEARTH_OK);
  gp.max_tokens = 20;
  gp.ignore_eos = 1;
  gp.stop = stops;
  gp.n_stop = 1;
  ASSERT_EQ(hearth_session_reset(s), HEARTH_OK);
  ASSERT_EQ(hearth_session_generate(s, g.gen_prompt.data(), g.gen_prompt.size(), &gp, nullptr,
                                    nullptr, &r),
            HEARTH_OK);
  EXPECT_EQ(r.finish_reason, HEARTH_FINISH_STOP);
  EXPECT_EQ(r.n_generated, 4);
  hearth_session_free(s);
}

TEST(ApiGenerate, TwoSessionsOnTwoThreadsAreIndependent) {
  const Golden& g = tiny_golden();
  hearth_model* m = tiny_model();
  // Thread B continues a different prompt; its expected ids come from a lone session first.
  hearth_session* ref = new_session(m);
  const std::vector<int32_t> want_b = generate_ids(ref, g.input_ids, 24);
  hearth_session_free(ref);
  ASSERT_EQ(want_b.size(), 24u);
  ASSERT_NE(want_b, g.gen_ids);

  std::vector<int32_t> got_a[3], got_b[3];
  auto run = [&](const std::vector<int32_t>& prompt, std::vector<int32_t>* out) {
    hearth_session* s = new_session(m);
    for (int round = 0; round < 3; ++round) {
      hearth_session_reset(s);
      out[round] = generate_ids(s, prompt, 24);
    }
    hearth_session_free(s);
  };
  std::thread a(run, std::cref(g.gen_prompt), got_a);
  std::thread b(run, std::cref(g.input_ids), got_b);
  a.join();
  b.join();
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(got_a[round], g.gen_ids) << "round " << round;
    EXPECT_EQ(got_b[round], want_b) << "round " << round;
  }
}

TEST(ApiGenerate, StateSaveRestoreResumesIdentically) {
  const Golden& g = tiny_golden();
  hearth_model* m = tiny_model();
  hearth_session* s1 = new_session(m);
  EXPECT_EQ(generate_ids(s1, g.gen_prompt, 10), slice(g.gen_ids, 0, 10));
  const std::vector<unsigned char> blob = save_state(s1);
  EXPECT_EQ(generate_ids(s1, {}, 14), slice(g.gen_ids, 10, 24));

  // A fresh session resumes from the blob.
  hearth_session* s2 = new_session(m);
  ASSERT_EQ(hearth_session_state_load(s2, blob.data(), blob.size()), HEARTH_OK)
      << hearth_last_error();
  EXPECT_EQ(generate_ids(s2, {}, 14), slice(g.gen_ids, 10, 24));
  // And the first one rewinds to it.
  ASSERT_EQ(hearth_session_state_load(s1, blob.data(), blob.size()), HEARTH_OK);
  EXPECT_EQ(generate_ids(s1, {}, 14), slice(g.gen_ids, 10, 24));

  // State saved after a prefill carries the logits: sampling right after loading works.
  hearth_session_reset(s1);
  ASSERT_EQ(hearth_session_prefill(s1, g.gen_prompt.data(), g.gen_prompt.size()), HEARTH_OK);
  const std::vector<unsigned char> blob2 = save_state(s1);
  hearth_session* s3 = new_session(m);
  ASSERT_EQ(hearth_session_state_load(s3, blob2.data(), blob2.size()), HEARTH_OK);
  int32_t t = -1;
  ASSERT_EQ(hearth_session_sample(s3, &t), HEARTH_OK);
  EXPECT_EQ(t, g.gen_ids[0]);

  // Too small a context for the saved conversation; damaged blobs.
  hearth_session* tiny = new_session(m, /*n_ctx=*/8);
  EXPECT_EQ(hearth_session_state_load(tiny, blob.data(), blob.size()), HEARTH_ERR_CONTEXT_FULL);
  EXPECT_EQ(hearth_session_state_load(s3, blob.data(), blob.size() - 4), HEARTH_ERR_BAD_STATE);
  std::vector<unsigned char> bad = blob;
  bad[8 + 8 * 4] ^= 0x40;  // the history count
  EXPECT_EQ(hearth_session_state_load(s3, bad.data(), bad.size()), HEARTH_ERR_BAD_STATE);
  EXPECT_NE(std::string(hearth_last_error()).find("hearth_session_state_load"), std::string::npos);
  bad = blob;
  bad[8 + 8 * 2] ^= 0x01;  // kv_dim: a different model
  EXPECT_EQ(hearth_session_state_load(s3, bad.data(), bad.size()), HEARTH_ERR_BAD_STATE);
  EXPECT_NE(std::string(hearth_last_error()).find("different model"), std::string::npos);
  for (hearth_session* s : {s1, s2, s3, tiny}) hearth_session_free(s);
}

// A blob holds its cache types: a session of other types refuses it naming both; one of the
// same types resumes it (q8_0 here).
TEST(ApiGenerate, StateFollowsTheCacheTypes) {
  const Golden& g = tiny_golden();
  auto session_of = [](int32_t k, int32_t v) {
    hearth_sampling_params sp;
    EXPECT_EQ(hearth_sampling_params_init(&sp, sizeof sp), HEARTH_OK);
    sp.temperature = 0;  // greedy: the continuation depends on the cache only
    hearth_session_params p;
    EXPECT_EQ(hearth_session_params_init(&p, sizeof p), HEARTH_OK);
    p.n_ctx = 128;
    p.sampling = &sp;
    p.cache_type_k = k;
    p.cache_type_v = v;
    hearth_session* s = nullptr;
    EXPECT_EQ(hearth_session_create(tiny_model(), &p, &s), HEARTH_OK) << hearth_last_error();
    return s;
  };
  hearth_session* q8 = session_of(HEARTH_CACHE_TYPE_Q8_0, HEARTH_CACHE_TYPE_Q8_0);
  generate_ids(q8, g.gen_prompt, 6);
  const std::vector<unsigned char> blob = save_state(q8);
  const std::vector<int32_t> cont = generate_ids(q8, {}, 8);
  hearth_session* same = session_of(HEARTH_CACHE_TYPE_Q8_0, HEARTH_CACHE_TYPE_Q8_0);
  ASSERT_EQ(hearth_session_state_load(same, blob.data(), blob.size()), HEARTH_OK)
      << hearth_last_error();
  EXPECT_EQ(generate_ids(same, {}, 8), cont);
  hearth_session* other = session_of(HEARTH_CACHE_TYPE_F16, HEARTH_CACHE_TYPE_Q8_0);
  EXPECT_EQ(hearth_session_state_load(other, blob.data(), blob.size()), HEARTH_ERR_BAD_STATE);
  EXPECT_NE(std::string(hearth_last_error())
                .find("q8_0 K / q8_0 V rows; this session's holds "
                      "f16 / q8_0"),
            std::string::npos)
      << hearth_last_error();
  for (hearth_session* s : {q8, same, other}) hearth_session_free(s);
}

// A format-1 blob (before typed caches: eight header fields, f32 rows counted in floats) loads
// into a session with f32 caches and resumes; into the default f16 session it is refused.
TEST(ApiGenerate, FormatOneStateLoadsIntoF32Sessions) {
  const Golden& g = tiny_golden();
  auto session_of = [](int32_t type) {
    hearth_sampling_params sp;
    EXPECT_EQ(hearth_sampling_params_init(&sp, sizeof sp), HEARTH_OK);
    sp.temperature = 0;
    hearth_session_params p;
    EXPECT_EQ(hearth_session_params_init(&p, sizeof p), HEARTH_OK);
    p.n_ctx = 128;
    p.sampling = &sp;
    p.cache_type_k = p.cache_type_v = type;
    hearth_session* s = nullptr;
    EXPECT_EQ(hearth_session_create(tiny_model(), &p, &s), HEARTH_OK) << hearth_last_error();
    return s;
  };
  hearth_session* f32 = session_of(HEARTH_CACHE_TYPE_F32);
  generate_ids(f32, g.gen_prompt, 6);
  const std::vector<unsigned char> blob = save_state(f32);
  const std::vector<int32_t> cont = generate_ids(f32, {}, 8);
  // Format 2's header: magic, then u64 fields format, layers, kv_dim, vocab, history, pending,
  // kv bytes, logits, K type, V type. Format 1: the first eight, the KV size in floats.
  std::vector<unsigned char> old(blob.begin(), blob.begin() + 8 + 8 * 8);
  uint64_t field = 1;
  std::memcpy(old.data() + 8, &field, 8);
  std::memcpy(&field, old.data() + 8 + 6 * 8, 8);
  field /= 4;
  std::memcpy(old.data() + 8 + 6 * 8, &field, 8);
  old.insert(old.end(), blob.begin() + 8 + 10 * 8, blob.end());
  hearth_session* again = session_of(HEARTH_CACHE_TYPE_F32);
  ASSERT_EQ(hearth_session_state_load(again, old.data(), old.size()), HEARTH_OK)
      << hearth_last_error();
  EXPECT_EQ(generate_ids(again, {}, 8), cont);
  hearth_session* f16 = session_of(HEARTH_CACHE_TYPE_F16);
  EXPECT_EQ(hearth_session_state_load(f16, old.data(), old.size()), HEARTH_ERR_BAD_STATE);
  for (hearth_session* s : {f32, again, f16}) hearth_session_free(s);
}

TEST(ApiGenerate, SampledStateResumesIdentically) {
  const Golden& g = tiny_golden();
  hearth_session* s1 = new_session(tiny_model(), 128, /*temperature=*/0.9f, /*seed=*/7);
  generate_ids(s1, g.gen_prompt, 6);
  const std::vector<unsigned char> blob = save_state(s1);
  const std::vector<int32_t> cont = generate_ids(s1, {}, 12);
  ASSERT_EQ(cont.size(), 12u);
  hearth_session* s2 = new_session(tiny_model(), 128, 0.9f, 7);
  ASSERT_EQ(hearth_session_state_load(s2, blob.data(), blob.size()), HEARTH_OK);
  EXPECT_EQ(generate_ids(s2, {}, 12), cont);
  hearth_session_free(s1);
  hearth_session_free(s2);
}

TEST(ApiTokens, TokenizeDetokenizeRoundTrip) {
  const Golden& g = tiny_golden();
  std::vector<int32_t> ids(64);
  size_t n = 0;
  ASSERT_EQ(hearth_tokenize(tiny_model(), kPromptText, std::strlen(kPromptText),
                            HEARTH_TOKENIZE_ADD_SPECIAL, ids.data(), ids.size(), &n),
            HEARTH_OK);
  ids.resize(n);
  EXPECT_EQ(ids, g.gen_prompt);
  std::string text(256, '\0');
  size_t len = 0;
  ASSERT_EQ(
      hearth_detokenize(tiny_model(), ids.data(), ids.size(), HEARTH_DETOKENIZE_STRIP_LEADING_SPACE,
                        text.data(), text.size(), &len),
      HEARTH_OK);
  text.resize(len);
  EXPECT_EQ(text, kPromptText);
  hearth_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hearth_model_get_info(tiny_model(), &info), HEARTH_OK);
  EXPECT_EQ(info.n_vocab, 32000);
  EXPECT_EQ(info.bos_token, 1);
  EXPECT_EQ(info.eos_token, 2);
  EXPECT_STREQ(info.architecture, "llama");
  EXPECT_EQ(std::string(info.path), tiny_gguf());
  int32_t is_end = -1;
  ASSERT_EQ(hearth_token_is_end(tiny_model(), info.eos_token, &is_end), HEARTH_OK);
  EXPECT_EQ(is_end, 1);
  ASSERT_EQ(hearth_token_is_end(tiny_model(), g.gen_ids[0], &is_end), HEARTH_OK);
  EXPECT_EQ(is_end, 0);
}

TEST(ApiChat, RendersBuiltinsAndTemplateText) {
  hearth_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
  std::string out(512, '\0');
  size_t len = 0;
  ASSERT_EQ(hearth_chat_render(nullptr, "chatml", msgs, 2, 1, out.data(), out.size(), &len),
            HEARTH_OK)
      << hearth_last_error();
  out.resize(len);
  EXPECT_EQ(out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  const char* tmpl =
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]"
      "{% endfor %}{% if add_generation_prompt %}>{% endif %}";
  out.assign(512, '\0');
  ASSERT_EQ(hearth_chat_render(tiny_model(), tmpl, msgs, 2, 0, out.data(), out.size(), &len),
            HEARTH_OK)
      << hearth_last_error();
  out.resize(len);
  EXPECT_EQ(out, "<s>[system:Be brief.][user:Hi]");
  // Sizing call first.
  EXPECT_EQ(hearth_chat_render(tiny_model(), tmpl, msgs, 2, 1, nullptr, 0, &len),
            HEARTH_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, std::strlen("<s>[system:Be brief.][user:Hi]>"));
}

// Repo ids resolve through the Hugging Face cache (offline here: a snapshot made in a temp dir).
TEST(ApiModel, LoadsRepoIdFromTheHubCache) {
  namespace fs = std::filesystem;
  const std::string cache = temp_dir() + "/hf-cache";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path repo = fs::path(cache) / "models--hearth-test--tiny";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / commit);
  write_file((repo / "refs" / "main").string(), commit);
  fs::create_symlink(tiny_gguf(), repo / "snapshots" / commit / "llama2-tiny-bf16.gguf");
  ASSERT_EQ(setenv("HF_HUB_CACHE", cache.c_str(), 1), 0);

  hearth_model_params mp;
  ASSERT_EQ(hearth_model_params_init(&mp, sizeof mp), HEARTH_OK);
  mp.offline = 1;
  hearth_model* m = nullptr;
  ASSERT_EQ(hearth_model_load("hearth-test/tiny", &mp, &m), HEARTH_OK) << hearth_last_error();
  hearth_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hearth_model_get_info(m, &info), HEARTH_OK);
  EXPECT_NE(std::string(info.path).find("snapshots/" + commit), std::string::npos);
  hearth_session* s = new_session(m);
  EXPECT_EQ(generate_ids(s, tiny_golden().gen_prompt, 5), slice(tiny_golden().gen_ids, 0, 5));
  hearth_session_free(s);
  hearth_model_free(m);  // the session was freed first; freeing in either order is allowed

  EXPECT_EQ(hearth_model_load("hearth-test/absent", &mp, &m), HEARTH_ERR_NOT_FOUND);
  EXPECT_NE(std::string(hearth_last_error()).find("hearth-test/absent"), std::string::npos);
  unsetenv("HF_HUB_CACHE");
}

TEST(ApiModel, SessionKeepsTheModelAlive) {
  hearth_model* m = nullptr;
  ASSERT_EQ(hearth_model_load(tiny_gguf().c_str(), nullptr, &m), HEARTH_OK);
  hearth_session* s = new_session(m);
  hearth_model_free(m);
  EXPECT_EQ(generate_ids(s, tiny_golden().gen_prompt, 4), slice(tiny_golden().gen_ids, 0, 4));
  hearth_session_free(s);
}

}  // namespace
}  // namespace hearth::test
