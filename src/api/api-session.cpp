// The C API's session calls: creation, sampling chains, step-by-step prefill/decode/sample,
// streaming generation and KV state save/restore. New per-session calls go here.
#include <cmath>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>

#include "api/api-internal.h"
#include "base/checked-math.h"
#include "runtime/structured-output.h"

namespace hearth::api {
namespace {

hearth_sampling_params default_sampling() {
  const SamplingParams d;
  hearth_sampling_params p{};
  p.struct_size = sizeof p;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.presence_penalty = d.presence_penalty;
  p.frequency_penalty = d.frequency_penalty;
  p.seed = d.seed;
  return p;
}

hearth_session_params default_session_params() {
  hearth_session_params p{};
  p.struct_size = sizeof p;
  p.n_ctx = 0;
  p.sampling = nullptr;
  p.cache_type_k = HEARTH_CACHE_TYPE_F16;
  p.cache_type_v = HEARTH_CACHE_TYPE_F16;
  return p;
}

// The v1 layout of hearth_session_params (up to `sampling`): older callers' struct_size.
constexpr size_t kSessionParamsV1Size = offsetof(hearth_session_params, cache_type_k);

// A HEARTH_CACHE_TYPE_* value (ggml's type ids) as a cache DType; nullopt for anything else.
std::optional<DType> cache_type(int32_t v) {
  if (v < 0) return std::nullopt;
  const auto t = DType(uint32_t(v));
  if (!kernels::is_kv_type(t)) return std::nullopt;
  return t;
}

hearth_generate_params default_generate_params() {
  hearth_generate_params p{};
  p.struct_size = sizeof p;
  p.max_tokens = -1;
  p.ignore_eos = 0;
  p.stop = nullptr;
  p.n_stop = 0;
  return p;
}

hearth_status check_tokens(const hearth_session* s, const int32_t* tokens, size_t n,
                           const char* call) {
  const int64_t n_vocab = s->engine->model().hparams().n_vocab;
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": tokens[" + std::to_string(i) +
                                                   "] = " + std::to_string(tokens[i]) +
                                                   " is outside the vocabulary");
  return HEARTH_OK;
}

hearth_status check_fits(const hearth_session* s, size_t n, const char* call) {
  if (int64_t(n) > s->session->n_ctx())
    return fail(HEARTH_ERR_CONTEXT_FULL, std::string(call) + ": the conversation would hold " +
                                             std::to_string(n) + " tokens but the context holds " +
                                             std::to_string(s->session->n_ctx()));
  return HEARTH_OK;
}

// After a failed evaluation the KV history is a prefix of what was asked; what the app passed
// earlier and the cache does not hold yet stays pending.
void resync_pending(hearth_session* s, const std::vector<int32_t>& before) {
  const auto& h = s->session->history();
  if (h.size() <= before.size() && std::equal(h.begin(), h.end(), before.begin()))
    s->pending.assign(before.begin() + long(h.size()), before.end());
  else
    s->pending.clear();
  s->logits_valid = false;
}

// Evaluates `conversation` (cached prefix reused) so logits belong to its last token.
hearth_status evaluate(hearth_session* s, const std::vector<int32_t>& conversation,
                       const char* call) {
  const std::vector<int32_t> before = s->conversation();
  Status st = s->session->evaluate(conversation, &s->logits);
  if (!st.is_ok()) {
    resync_pending(s, before);
    return from_status(st, call);
  }
  s->pending.clear();
  s->logits_valid = true;
  return HEARTH_OK;
}

// Logits of the conversation's last token, computing them when generate() left them stale.
hearth_status ensure_logits(hearth_session* s, const char* call) {
  if (s->logits_valid) return HEARTH_OK;
  const std::vector<int32_t> conv = s->conversation();
  if (conv.empty())
    return fail(HEARTH_ERR_BAD_STATE,
                std::string(call) + ": the conversation is empty; call hearth_session_prefill");
  return evaluate(s, conv, call);
}

int32_t finish_code(const std::string& reason) {
  if (reason == "stop") return HEARTH_FINISH_STOP;
  if (reason == "cancelled") return HEARTH_FINISH_CANCELLED;
  if (reason == "context") return HEARTH_FINISH_CONTEXT;
  return HEARTH_FINISH_LENGTH;
}

// State blob: a fixed header of u64 fields, then history and pending ids (i32), the KV rows
// (KvCache::save: per layer K then V in the cache's element types) and the logits (f32), all
// in host byte order. Readers check every count against the model and the session's cache.
// Format 1 (before typed caches) had no type fields and f32 rows counted in floats: it loads
// into a session whose cache types are f32.
constexpr char kStateMagic[8] = {'H', 'E', 'A', 'R', 'T', 'H', 'S', 'T'};
constexpr uint64_t kStateFormat = 2;
enum StateField {
  kFormat,
  kLayers,
  kKvDim,
  kVocab,
  kHistory,
  kPending,
  kKvBytes,  // format 1: KV floats
  kLogits,
  kFormat1FieldCount,
  kKType = kFormat1FieldCount,  // ggml type ids of the K and V rows
  kVType,
  kFieldCount
};
constexpr size_t header_bytes(uint64_t format) {
  return sizeof kStateMagic + (format == 1 ? kFormat1FieldCount : kFieldCount) * sizeof(uint64_t);
}
constexpr size_t kHeaderBytes = header_bytes(kStateFormat);

}  // namespace

hearth_status to_sampling(const hearth_sampling_params* in, SamplingParams* out, const char* call) {
  hearth_sampling_params c = default_sampling();
  if (hearth_status s = read_params(in, &c, call, "hearth_sampling_params"); s != HEARTH_OK)
    return s;
  for (float v :
       {c.temperature, c.top_p, c.min_p, c.repeat_penalty, c.presence_penalty, c.frequency_penalty})
    if (!std::isfinite(v))
      return fail(HEARTH_ERR_INVALID_ARGUMENT,
                  std::string(call) + ": hearth_sampling_params holds a NaN or infinity");
  if (c.repeat_penalty <= 0)
    return fail(HEARTH_ERR_INVALID_ARGUMENT,
                std::string(call) + ": repeat_penalty must be > 0 (1 = off)");
  if (c.repeat_last_n < -1)
    return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": repeat_last_n below -1");
  out->temperature = c.temperature;
  out->top_k = c.top_k;
  out->top_p = c.top_p;
  out->min_p = c.min_p;
  out->repeat_penalty = c.repeat_penalty;
  out->repeat_last_n = c.repeat_last_n;
  out->presence_penalty = c.presence_penalty;
  out->frequency_penalty = c.frequency_penalty;
  out->seed = c.seed;
  return HEARTH_OK;
}

}  // namespace hearth::api

using namespace hearth;
using namespace hearth::api;

extern "C" {

hearth_status hearth_sampling_params_init(hearth_sampling_params* params, size_t struct_size) {
  return init_params(params, struct_size, default_sampling(), "hearth_sampling_params_init");
}

hearth_status hearth_session_params_init(hearth_session_params* params, size_t struct_size) {
  return init_params(params, struct_size, default_session_params(), "hearth_session_params_init",
                     kSessionParamsV1Size);
}

hearth_status hearth_generate_params_init(hearth_generate_params* params, size_t struct_size) {
  return init_params(params, struct_size, default_generate_params(), "hearth_generate_params_init");
}

hearth_status hearth_session_create(hearth_model* model, const hearth_session_params* params,
                                    hearth_session** out) {
  static const char* kCall = "hearth_session_create";
  return guarded(kCall, [&]() -> hearth_status {
    if (!out) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_create: out is NULL");
    *out = nullptr;
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_create: model is NULL");
    hearth_session_params p = default_session_params();
    if (params) {
      if (hearth_status s =
              read_params(params, &p, kCall, "hearth_session_params", kSessionParamsV1Size);
          s != HEARTH_OK)
        return s;
    }
    if (p.n_ctx < 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_create: n_ctx is negative");
    KvCacheTypes kv_types;
    for (auto [field, value, out] : {std::tuple{"cache_type_k", p.cache_type_k, &kv_types.k},
                                     std::tuple{"cache_type_v", p.cache_type_v, &kv_types.v}}) {
      const std::optional<DType> t = cache_type(value);
      if (!t)
        return fail(HEARTH_ERR_INVALID_ARGUMENT,
                    std::string("hearth_session_create: ") + field + " = " + std::to_string(value) +
                        " is not a cache type (HEARTH_CACHE_TYPE_F32, F16, BF16 or Q8_0)");
      const int64_t head_dim = model->engine->model().hparams().head_dim;
      if (*t == DType::Q8_0 && head_dim % 32 != 0)
        return fail(HEARTH_ERR_INVALID_ARGUMENT,
                    std::string("hearth_session_create: ") + field +
                        " q8_0 needs a head_dim that is a multiple of 32; this model's is " +
                        std::to_string(head_dim));
      *out = *t;
    }
    auto s = std::make_unique<hearth_session>();
    if (p.sampling) {
      if (hearth_status st = to_sampling(p.sampling, &s->sampling, kCall); st != HEARTH_OK)
        return st;
    }
    s->engine = model->engine;
    s->session = std::make_unique<Session>(s->engine, p.n_ctx, kv_types);
    if (Status st = s->session->init(); !st.is_ok()) return from_status(st, kCall);
    s->sampler = std::make_unique<Sampler>(s->sampling);
    *out = s.release();
    return succeed();
  });
}

void hearth_session_free(hearth_session* session) {
  delete session;
}

hearth_status hearth_session_set_sampling(hearth_session* session,
                                          const hearth_sampling_params* params) {
  static const char* kCall = "hearth_session_set_sampling";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_set_sampling: session is NULL");
    if (!params)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_set_sampling: params is NULL");
    SamplingParams sp;
    if (hearth_status st = to_sampling(params, &sp, kCall); st != HEARTH_OK) return st;
    session->sampling = sp;
    session->sampler = std::make_unique<Sampler>(sp);
    return succeed();
  });
}

hearth_status hearth_session_set_output_format(hearth_session* session, int32_t format,
                                               const char* text) {
  static const char* kCall = "hearth_session_set_output_format";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(kCall) + ": session is NULL");
    OutputFormat f;
    switch (format) {
      case HEARTH_FORMAT_TEXT:
        session->output_grammar.reset();
        return succeed();
      case HEARTH_FORMAT_GBNF:
        f.kind = OutputFormat::Kind::kGbnf;
        break;
      case HEARTH_FORMAT_JSON_SCHEMA:
        f.kind = OutputFormat::Kind::kJsonSchema;
        break;
      case HEARTH_FORMAT_JSON_OBJECT:
        f.kind = OutputFormat::Kind::kJsonObject;
        break;
      default:
        return fail(HEARTH_ERR_INVALID_ARGUMENT,
                    std::string(kCall) + ": format " + std::to_string(format) + " is unknown");
    }
    if (f.kind != OutputFormat::Kind::kJsonObject) {
      if (!text) return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(kCall) + ": text is NULL");
      f.text = text;
    }
    auto grammar = compile_output_format(f);
    if (!grammar)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(kCall) + ": " + grammar.message());
    session->output_grammar = grammar.value();
    return succeed();
  });
}

hearth_status hearth_session_reset(hearth_session* session) {
  return guarded("hearth_session_reset", [&]() -> hearth_status {
    if (!session) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_reset: session is NULL");
    session->session->reset();
    session->pending.clear();
    session->logits_valid = false;
    return succeed();
  });
}

hearth_status hearth_session_prefill(hearth_session* session, const int32_t* tokens,
                                     size_t n_tokens) {
  static const char* kCall = "hearth_session_prefill";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_prefill: session is NULL");
    if (!tokens || n_tokens == 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_prefill: no tokens");
    if (hearth_status s = check_tokens(session, tokens, n_tokens, kCall); s != HEARTH_OK) return s;
    std::vector<int32_t> full = session->conversation();
    if (hearth_status s = check_fits(session, full.size() + n_tokens, kCall); s != HEARTH_OK)
      return s;
    full.insert(full.end(), tokens, tokens + n_tokens);
    if (hearth_status s = evaluate(session, full, kCall); s != HEARTH_OK) return s;
    return succeed();
  });
}

hearth_status hearth_session_decode(hearth_session* session, int32_t token) {
  static const char* kCall = "hearth_session_decode";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_decode: session is NULL");
    if (hearth_status s = check_tokens(session, &token, 1, kCall); s != HEARTH_OK) return s;
    std::vector<int32_t> full = session->conversation();
    if (hearth_status s = check_fits(session, full.size() + 1, kCall); s != HEARTH_OK) return s;
    if (session->pending.empty() && !full.empty()) {
      Status st = session->session->decode_one(token, &session->logits);
      session->logits_valid = st.is_ok();
      return from_status(st, kCall);
    }
    full.push_back(token);
    if (hearth_status s = evaluate(session, full, kCall); s != HEARTH_OK) return s;
    return succeed();
  });
}

hearth_status hearth_session_sample(hearth_session* session, int32_t* token) {
  static const char* kCall = "hearth_session_sample";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_sample: session is NULL");
    if (!token) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_sample: token is NULL");
    if (hearth_status s = ensure_logits(session, kCall); s != HEARTH_OK) return s;
    const std::vector<int32_t> conv = session->conversation();
    *token =
        session->sampler->sample(session->logits.data(), int32_t(session->logits.size()), conv);
    return succeed();
  });
}

hearth_status hearth_session_logits(hearth_session* session, const float** logits,
                                    size_t* n_vocab) {
  static const char* kCall = "hearth_session_logits";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_logits: session is NULL");
    if (!logits || !n_vocab)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_logits: an output is NULL");
    if (hearth_status s = ensure_logits(session, kCall); s != HEARTH_OK) return s;
    *logits = session->logits.data();
    *n_vocab = session->logits.size();
    return succeed();
  });
}

hearth_status hearth_session_history(const hearth_session* session, int32_t* tokens,
                                     size_t capacity, size_t* n_tokens) {
  return guarded("hearth_session_history", [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_history: session is NULL");
    if (!n_tokens)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_history: n_tokens is NULL");
    if (!tokens && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_history: tokens is NULL");
    const std::vector<int32_t> conv = session->conversation();
    return copy_out(conv.data(), conv.size(), tokens, capacity, n_tokens, "hearth_session_history");
  });
}

hearth_status hearth_session_generate(hearth_session* session, const int32_t* prompt,
                                      size_t n_prompt, const hearth_generate_params* params,
                                      hearth_token_callback callback, void* user_data,
                                      hearth_generate_result* result) {
  static const char* kCall = "hearth_session_generate";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_generate: session is NULL");
    if (!prompt && n_prompt > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_generate: prompt is NULL");
    if (result && result->struct_size < sizeof(hearth_generate_result))
      return fail(HEARTH_ERR_INVALID_ARGUMENT,
                  "hearth_session_generate: result->struct_size is not set");
    if (hearth_status s = check_tokens(session, prompt, n_prompt, kCall); s != HEARTH_OK) return s;
    hearth_generate_params p = default_generate_params();
    if (params) {
      if (hearth_status s = read_params(params, &p, kCall, "hearth_generate_params");
          s != HEARTH_OK)
        return s;
    }
    if (p.max_tokens < -1)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_generate: max_tokens below -1");
    if (p.n_stop > 0 && !p.stop)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_generate: stop is NULL");
    GenerateOptions opt;
    opt.max_tokens = p.max_tokens;
    opt.ignore_eos = p.ignore_eos != 0;
    opt.sampling = session->sampling;
    if (session->output_grammar)
      opt.constraint = make_constraint(*session->engine, session->output_grammar);
    for (size_t i = 0; i < p.n_stop; ++i) {
      if (!p.stop[i] || !*p.stop[i])
        return fail(HEARTH_ERR_INVALID_ARGUMENT,
                    "hearth_session_generate: stop[" + std::to_string(i) + "] is NULL or empty");
      opt.stop.emplace_back(p.stop[i]);
    }
    std::vector<int32_t> full = session->conversation();
    if (hearth_status s = check_fits(session, full.size() + n_prompt, kCall); s != HEARTH_OK)
      return s;
    full.insert(full.end(), prompt, prompt + n_prompt);
    if (full.empty())
      return fail(HEARTH_ERR_BAD_STATE,
                  "hearth_session_generate: the conversation is empty; pass a prompt");

    TokenCallback on_token;
    if (callback) {
      on_token = [&](int32_t id, const std::string& piece) {
        return callback(id, piece.c_str(), piece.size(), user_data) != 0;
      };
    }
    const std::vector<int32_t> before = session->conversation();
    auto r = session->session->generate(full, opt, on_token);
    if (!r.is_ok()) {
      resync_pending(session, before);
      return from_status(r.status(), kCall);
    }
    // The last sampled token was never evaluated: it waits in `pending` for the next call.
    std::vector<int32_t> conv = full;
    conv.insert(conv.end(), r->tokens.begin(), r->tokens.end());
    const auto& h = session->session->history();
    session->pending.assign(conv.begin() + long(std::min(h.size(), conv.size())), conv.end());
    session->logits_valid = false;
    if (result) {
      const GenerateStats& st = r->stats;
      hearth_generate_result out{};
      out.struct_size = sizeof out;
      out.finish_reason = finish_code(st.finish_reason);
      out.n_prompt_tokens = int32_t(st.prompt_tokens);
      out.n_prompt_evaluated = int32_t(st.prompt_evaluated);
      out.n_generated = int32_t(st.generated_tokens);
      out.prompt_ms = st.prompt_ms;
      out.ttft_ms = st.ttft_ms;
      out.gen_ms = st.gen_ms;
      if (hearth_status s = write_result(out, result, kCall, "hearth_generate_result");
          s != HEARTH_OK)
        return s;
    }
    return succeed();
  });
}

hearth_status hearth_session_state_save(hearth_session* session, void* buffer, size_t capacity,
                                        size_t* size) {
  static const char* kCall = "hearth_session_state_save";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_state_save: session is NULL");
    if (!size) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_state_save: size is NULL");
    if (!buffer && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_state_save: buffer is NULL");
    const HParams& hp = session->engine->model().hparams();
    const std::vector<int32_t>& hist = session->session->history();
    uint64_t f[kFieldCount];
    f[kFormat] = kStateFormat;
    f[kLayers] = uint64_t(hp.n_layer);
    f[kKvDim] = uint64_t(hp.kv_dim());
    f[kVocab] = uint64_t(hp.n_vocab);
    f[kHistory] = hist.size();
    f[kPending] = session->pending.size();
    f[kKvBytes] = session->session->saved_kv_bytes(int64_t(hist.size()));
    f[kLogits] = session->logits_valid ? session->logits.size() : 0;
    f[kKType] = uint64_t(session->session->kv_types().k);
    f[kVType] = uint64_t(session->session->kv_types().v);
    const size_t total = kHeaderBytes + 4 * (f[kHistory] + f[kPending] + f[kLogits]) + f[kKvBytes];
    *size = total;
    if (total > capacity)
      return fail(HEARTH_ERR_BUFFER_TOO_SMALL, "hearth_session_state_save: needs " +
                                                   std::to_string(total) + " bytes, buffer holds " +
                                                   std::to_string(capacity));
    std::vector<int32_t> tokens;
    std::vector<uint8_t> kv;
    if (Status st = session->session->save_state(&tokens, &kv); !st.is_ok())
      return from_status(st, kCall);
    if (kv.size() != f[kKvBytes])
      return fail(HEARTH_ERR_INTERNAL, "hearth_session_state_save: KV size mismatch");
    char* p = static_cast<char*>(buffer);
    auto put = [&p](const void* src, size_t bytes) {
      if (bytes > 0) std::memcpy(p, src, bytes);
      p += bytes;
    };
    put(kStateMagic, sizeof kStateMagic);
    put(f, sizeof f);
    put(tokens.data(), 4 * tokens.size());
    put(session->pending.data(), 4 * session->pending.size());
    put(kv.data(), kv.size());
    if (f[kLogits] > 0) put(session->logits.data(), 4 * f[kLogits]);
    return succeed();
  });
}

hearth_status hearth_session_state_load(hearth_session* session, const void* buffer, size_t size) {
  static const char* kCall = "hearth_session_state_load";
  return guarded(kCall, [&]() -> hearth_status {
    if (!session)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_state_load: session is NULL");
    if (!buffer)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_session_state_load: buffer is NULL");
    auto bad = [](const std::string& why) {
      return fail(HEARTH_ERR_BAD_STATE, "hearth_session_state_load: " + why);
    };
    const char* p = static_cast<const char*>(buffer);
    uint64_t f[kFieldCount] = {};
    if (size < header_bytes(1) || std::memcmp(buffer, kStateMagic, sizeof kStateMagic) != 0)
      return bad("not a Hearth session state (bad magic or too short)");
    std::memcpy(&f[kFormat], p + sizeof kStateMagic, sizeof f[kFormat]);
    if (f[kFormat] != 1 && f[kFormat] != kStateFormat)
      return bad("state format " + std::to_string(f[kFormat]) + " is not supported");
    const size_t header = header_bytes(f[kFormat]);
    if (size < header) return bad("not a Hearth session state (bad magic or too short)");
    std::memcpy(f, p + sizeof kStateMagic, header - sizeof kStateMagic);
    if (f[kFormat] == 1) {  // f32 rows, counted in floats
      const auto bytes = checked_mul(f[kKvBytes], 4);
      if (!bytes) return bad("KV size field is inconsistent");
      f[kKvBytes] = *bytes;
      f[kKType] = f[kVType] = uint64_t(DType::F32);
    }
    const HParams& hp = session->engine->model().hparams();
    if (f[kLayers] != uint64_t(hp.n_layer) || f[kKvDim] != uint64_t(hp.kv_dim()) ||
        f[kVocab] != uint64_t(hp.n_vocab))
      return bad("the state was saved from a different model");
    const auto conv = checked_add(f[kHistory], f[kPending]);
    if (!conv || *conv > uint64_t(session->session->n_ctx()))
      return fail(HEARTH_ERR_CONTEXT_FULL,
                  "hearth_session_state_load: the saved conversation exceeds this context");
    // Rows of another element type would need a conversion that changes the logits the state
    // promises to continue from: the types must match (the session is created with them).
    const KvCacheTypes mine = session->session->kv_types();
    const auto type_name = [](uint64_t id) -> std::string {
      const auto t = id < 64 ? cache_type(int32_t(id)) : std::nullopt;
      return t ? kv_type_name(*t) : "type id " + std::to_string(id);
    };
    if (f[kKType] != uint64_t(mine.k) || f[kVType] != uint64_t(mine.v))
      return bad("the state's KV cache holds " + type_name(f[kKType]) + " K / " +
                 type_name(f[kVType]) + " V rows; this session's holds " + kv_type_name(mine.k) +
                 " / " + kv_type_name(mine.v) + " (create it with the same cache types)");
    if (f[kKvBytes] != session->session->saved_kv_bytes(int64_t(f[kHistory])))
      return bad("KV size field is inconsistent");
    if (f[kLogits] != 0 && f[kLogits] != f[kVocab]) return bad("logits size field is invalid");
    const auto items = checked_add(*conv, f[kLogits]);
    const auto words = items ? checked_mul(*items, 4) : std::nullopt;
    const auto bytes = words ? checked_add(*words, f[kKvBytes]) : std::nullopt;
    if (!bytes || *bytes != size - header)
      return bad("size " + std::to_string(size) + " does not match its header");
    p += header;
    auto take = [&p](auto* vec, uint64_t n) {
      using T = typename std::remove_reference_t<decltype(*vec)>::value_type;
      vec->resize(size_t(n));
      if (n > 0) std::memcpy(vec->data(), p, size_t(n) * sizeof(T));
      p += n * sizeof(T);
    };
    std::vector<int32_t> hist, pending;
    std::vector<uint8_t> kv;
    std::vector<float> logits;
    take(&hist, f[kHistory]);
    take(&pending, f[kPending]);
    take(&kv, f[kKvBytes]);
    take(&logits, f[kLogits]);
    if (hearth_status s = check_tokens(session, hist.data(), hist.size(), kCall); s != HEARTH_OK)
      return s;
    if (hearth_status s = check_tokens(session, pending.data(), pending.size(), kCall);
        s != HEARTH_OK)
      return s;
    const KvCacheTypes saved{DType(uint32_t(f[kKType])), DType(uint32_t(f[kVType]))};
    if (Status st = session->session->restore_state(hist, kv, saved); !st.is_ok()) {
      session->session->reset();
      session->pending.clear();
      session->logits_valid = false;
      return from_status(st, kCall);
    }
    session->pending = std::move(pending);
    session->logits_valid = !logits.empty();
    session->logits = std::move(logits);
    // The step sampler's random stream restarts from its seed (it is not part of the state).
    session->sampler = std::make_unique<Sampler>(session->sampling);
    return succeed();
  });
}

}  // extern "C"
