// The C API's model-level calls: versions, errors, parameter defaults, loading (path or Hub repo
// id), model info, tokens, embeddings and chat templates. Session calls live in api-session.cpp.
#include <cmath>
#include <cstddef>

#include "api/api-internal.h"
#include "base/mapped-file.h"
#include "hub/progress.h"
#include "hub/pull.h"
#include "hub/repo-spec.h"
#include "runtime/chat-tokenize.h"
#include "runtime/chat/chat-template.h"

#ifndef HEARTH_VERSION_STRING
#error "HEARTH_VERSION_STRING must come from CMake (project version)"
#endif

namespace hearth::api {

namespace {
thread_local std::string g_last_error;
}  // namespace

void set_last_error(std::string message) {
  g_last_error = std::move(message);
}

hearth_status copy_string_out(const std::string& s, char* buffer, size_t capacity, size_t* length,
                              const char* call) {
  *length = s.size();
  if (s.size() >= capacity)
    return fail(HEARTH_ERR_BUFFER_TOO_SMALL,
                std::string(call) + ": needs " + std::to_string(s.size() + 1) +
                    " bytes with the NUL, buffer holds " + std::to_string(capacity));
  std::memcpy(buffer, s.data(), s.size());
  buffer[s.size()] = '\0';
  return succeed();
}

namespace {

hearth_model_params default_model_params() {
  hearth_model_params p{};
  p.struct_size = sizeof p;
  p.n_threads = 0;
  p.gpu_layers = 0;
  p.progress = nullptr;
  p.progress_user_data = nullptr;
  p.offline = 0;
  p.no_weight_cache = 0;
  p.cache_verify = HEARTH_CACHE_VERIFY_LAZY;
  p.no_amx = 0;
  p.amx_min_tokens = 0;
  p.no_cuda_graphs = 0;
  p.cuda_chain_depth = CudaOptions{}.greedy_chain_depth;
  p.n_cpu_moe = 0;
  p.decode_lanes = HEARTH_DECODE_LANES_AUTO;
  return p;
}

// The v1 layout of hearth_model_params (up to `offline`): older callers' struct_size.
constexpr size_t kModelParamsV1Size = offsetof(hearth_model_params, no_weight_cache);

bool token_in_range(const hearth_model* model, int32_t id) {
  return id >= 0 && int64_t(id) < model->engine->model().hparams().n_vocab;
}

// Resolves a repo id through the Hugging Face cache (and the network unless offline).
hearth_status resolve_repo(const std::string& name, bool offline, std::string* path) {
  if (!hub::looks_like_repo_spec(name))
    return fail(HEARTH_ERR_NOT_FOUND, "hearth_model_load: " + name + ": no such file or directory");
  auto spec = hub::parse_repo_spec(name);
  if (!spec.is_ok())
    return fail(HEARTH_ERR_NOT_FOUND, "hearth_model_load: " + name +
                                          ": no such file, and not a repo id (" + spec.message() +
                                          ")");
  hub::HubEnv env = hub::hub_env_from_environment();
  if (offline) env.offline = true;
  // A library must not draw on the app's terminal: downloads run quietly.
  hub::Progress quiet(hub::Progress::Mode::kQuiet);
  auto pulled = hub::pull(env, spec.value(), {}, &quiet);
  if (!pulled.is_ok())
    return fail(env.offline ? HEARTH_ERR_NOT_FOUND : HEARTH_ERR_FAILED,
                "hearth_model_load: " + pulled.message());
  *path = pulled->model_path;
  return HEARTH_OK;
}

}  // namespace
}  // namespace hearth::api

using namespace hearth;
using namespace hearth::api;

extern "C" {

const char* hearth_version(void) {
  return HEARTH_VERSION_STRING;
}

uint32_t hearth_abi_version(void) {
  return HEARTH_ABI_VERSION;
}

const char* hearth_last_error(void) {
  return g_last_error.c_str();
}

const char* hearth_status_name(hearth_status status) {
  switch (status) {
    case HEARTH_OK:
      return "HEARTH_OK";
    case HEARTH_ERR_INVALID_ARGUMENT:
      return "HEARTH_ERR_INVALID_ARGUMENT";
    case HEARTH_ERR_NOT_FOUND:
      return "HEARTH_ERR_NOT_FOUND";
    case HEARTH_ERR_CANCELLED:
      return "HEARTH_ERR_CANCELLED";
    case HEARTH_ERR_BUFFER_TOO_SMALL:
      return "HEARTH_ERR_BUFFER_TOO_SMALL";
    case HEARTH_ERR_BAD_STATE:
      return "HEARTH_ERR_BAD_STATE";
    case HEARTH_ERR_CONTEXT_FULL:
      return "HEARTH_ERR_CONTEXT_FULL";
    case HEARTH_ERR_FAILED:
      return "HEARTH_ERR_FAILED";
    case HEARTH_ERR_OUT_OF_MEMORY:
      return "HEARTH_ERR_OUT_OF_MEMORY";
    case HEARTH_ERR_INTERNAL:
      return "HEARTH_ERR_INTERNAL";
    default:
      return "HEARTH_ERR_UNKNOWN";
  }
}

hearth_status hearth_model_params_init(hearth_model_params* params, size_t struct_size) {
  return init_params(params, struct_size, default_model_params(), "hearth_model_params_init",
                     kModelParamsV1Size);
}

hearth_status hearth_model_load(const char* path_or_repo, const hearth_model_params* params,
                                hearth_model** out) {
  static const char* kCall = "hearth_model_load";
  return guarded(kCall, [&]() -> hearth_status {
    if (!out) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: out is NULL");
    *out = nullptr;
    if (!path_or_repo || !*path_or_repo)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: path_or_repo is NULL or empty");
    hearth_model_params p = default_model_params();
    if (params) {
      if (hearth_status s =
              read_params(params, &p, kCall, "hearth_model_params", kModelParamsV1Size);
          s != HEARTH_OK)
        return s;
    }
    if (p.n_threads < 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: n_threads is negative");
    if (p.gpu_layers < kGpuLayersAuto)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: gpu_layers below -2");
    if (p.n_cpu_moe < kCpuMoeAll)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: n_cpu_moe below -1");
    if (p.decode_lanes < HEARTH_DECODE_LANES_AUTO || p.decode_lanes > HEARTH_DECODE_LANES_OFF)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: decode_lanes " +
                                                   std::to_string(p.decode_lanes) +
                                                   " is not a HEARTH_DECODE_LANES_* value");

    std::string path = path_or_repo;
    if (!file_exists(path) && !is_directory(path)) {
      if (hearth_status s = resolve_repo(path, p.offline != 0, &path); s != HEARTH_OK) return s;
    }
    if (p.cache_verify < HEARTH_CACHE_VERIFY_LAZY || p.cache_verify > HEARTH_CACHE_VERIFY_FULL)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: cache_verify " +
                                                   std::to_string(p.cache_verify) +
                                                   " is not a HEARTH_CACHE_VERIFY_* value");
    LoadOptions lo;
    lo.n_threads = p.n_threads;
    lo.gpu_layers = p.gpu_layers;
    lo.cpu_moe = p.n_cpu_moe;
    lo.use_weight_cache = p.no_weight_cache == 0;
    lo.cpu.cache_verify = p.cache_verify == HEARTH_CACHE_VERIFY_FULL ? CacheVerify::Mode::kFull
                          : p.cache_verify == HEARTH_CACHE_VERIFY_SAMPLE
                              ? CacheVerify::Mode::kSample
                              : CacheVerify::Mode::kLazy;
    lo.cpu.amx.enabled = p.no_amx == 0;
    lo.cpu.amx.min_tokens = p.amx_min_tokens;
    lo.cpu.decode_lanes = p.decode_lanes == HEARTH_DECODE_LANES_ON    ? CpuOptions::Lanes::kOn
                          : p.decode_lanes == HEARTH_DECODE_LANES_OFF ? CpuOptions::Lanes::kOff
                                                                      : CpuOptions::Lanes::kAuto;
    lo.cuda.graphs = p.no_cuda_graphs == 0;
    lo.cuda.greedy_chain_depth = p.cuda_chain_depth;
    if (std::string bad = cpu_options_error(lo.cpu); !bad.empty())
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: " + bad);
    if (std::string bad = cuda_options_error(lo.cuda); !bad.empty())
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_load: cuda_chain_depth: " + bad);
    bool cancelled = false;
    if (p.progress) {
      lo.progress = [&](float fraction) {
        if (p.progress(fraction, p.progress_user_data) != 0) return true;
        cancelled = true;
        return false;
      };
    }
    auto engine = Engine::load(path, lo);
    if (!engine.is_ok()) {
      if (cancelled)
        return fail(HEARTH_ERR_CANCELLED,
                    "hearth_model_load: " + path + ": cancelled by the progress callback");
      return fail(HEARTH_ERR_FAILED, "hearth_model_load: " + engine.message());
    }
    auto model = std::make_unique<hearth_model>();
    model->engine = std::move(engine).value();
    model->arch_name = model->engine->model().arch().gguf_name;
    *out = model.release();
    return succeed();
  });
}

void hearth_model_free(hearth_model* model) {
  delete model;
}

hearth_status hearth_model_get_info(const hearth_model* model, hearth_model_info* out) {
  static const char* kCall = "hearth_model_get_info";
  return guarded(kCall, [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_get_info: model is NULL");
    if (!out) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_model_get_info: out is NULL");
    const Engine& e = *model->engine;
    const HParams& hp = e.model().hparams();
    hearth_model_info info{};
    info.struct_size = sizeof info;
    info.n_vocab = int32_t(hp.n_vocab);
    info.n_embd = int32_t(hp.n_embd);
    info.n_layer = int32_t(hp.n_layer);
    info.n_ctx_train = int32_t(std::min<int64_t>(hp.n_ctx_train, INT32_MAX));
    info.bos_token = e.tokenizer().bos_id();
    info.eos_token = e.tokenizer().eos_id();
    info.name = e.name().c_str();
    info.architecture = model->arch_name.c_str();
    info.path = e.model().source_path().c_str();
    if (hearth_status s = write_result(info, out, kCall, "hearth_model_info"); s != HEARTH_OK)
      return s;
    return succeed();
  });
}

hearth_status hearth_tokenize(const hearth_model* model, const char* text, size_t text_len,
                              uint32_t flags, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return guarded("hearth_tokenize", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_tokenize: model is NULL");
    if (!n_tokens) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_tokenize: n_tokens is NULL");
    if (!text && text_len > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_tokenize: text is NULL");
    if (!tokens && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_tokenize: tokens is NULL");
    const std::vector<int32_t> ids = model->engine->tokenizer().encode(
        std::string_view(text ? text : "", text_len), (flags & HEARTH_TOKENIZE_ADD_SPECIAL) != 0,
        (flags & HEARTH_TOKENIZE_PARSE_SPECIAL) != 0);
    return copy_out(ids.data(), ids.size(), tokens, capacity, n_tokens, "hearth_tokenize");
  });
}

hearth_status hearth_detokenize(const hearth_model* model, const int32_t* tokens, size_t n_tokens,
                                uint32_t flags, char* text, size_t capacity, size_t* length) {
  return guarded("hearth_detokenize", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_detokenize: model is NULL");
    if (!length) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_detokenize: length is NULL");
    if (!tokens && n_tokens > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_detokenize: tokens is NULL");
    if (!text && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_detokenize: text is NULL");
    for (size_t i = 0; i < n_tokens; ++i)
      if (!token_in_range(model, tokens[i]))
        return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_detokenize: tokens[" + std::to_string(i) +
                                                     "] = " + std::to_string(tokens[i]) +
                                                     " is outside the vocabulary");
    StreamDecoder decoder(model->engine->tokenizer(),
                          (flags & HEARTH_DETOKENIZE_STRIP_LEADING_SPACE) != 0);
    std::string s;
    for (size_t i = 0; i < n_tokens; ++i) s += decoder.push(tokens[i]);
    s += decoder.flush();
    return copy_string_out(s, text, capacity, length, "hearth_detokenize");
  });
}

hearth_status hearth_token_to_piece(const hearth_model* model, int32_t token, char* piece,
                                    size_t capacity, size_t* length) {
  return guarded("hearth_token_to_piece", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_token_to_piece: model is NULL");
    if (!length) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_token_to_piece: length is NULL");
    if (!piece && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_token_to_piece: piece is NULL");
    if (!token_in_range(model, token))
      return fail(
          HEARTH_ERR_INVALID_ARGUMENT,
          "hearth_token_to_piece: token " + std::to_string(token) + " is outside the vocabulary");
    return copy_string_out(model->engine->tokenizer().token_bytes(token), piece, capacity, length,
                           "hearth_token_to_piece");
  });
}

hearth_status hearth_token_is_end(const hearth_model* model, int32_t token, int32_t* is_end) {
  return guarded("hearth_token_is_end", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_token_is_end: model is NULL");
    if (!is_end) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_token_is_end: is_end is NULL");
    if (!token_in_range(model, token))
      return fail(
          HEARTH_ERR_INVALID_ARGUMENT,
          "hearth_token_is_end: token " + std::to_string(token) + " is outside the vocabulary");
    *is_end = model->engine->tokenizer().is_end_of_generation(token) ? 1 : 0;
    return succeed();
  });
}

hearth_status hearth_embed(const hearth_model* model, const int32_t* tokens, size_t n_tokens,
                           float* embedding, size_t capacity, size_t* n_embd) {
  return guarded("hearth_embed", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_embed: model is NULL");
    if (!n_embd) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_embed: n_embd is NULL");
    if (!tokens || n_tokens == 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_embed: no tokens");
    if (!embedding && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_embed: embedding is NULL");
    const Model& m = model->engine->model();
    const int64_t dim = m.hparams().n_embd;
    *n_embd = size_t(dim);
    if (size_t(dim) > capacity)
      return fail(HEARTH_ERR_BUFFER_TOO_SMALL, "hearth_embed: needs room for " +
                                                   std::to_string(dim) + " floats, buffer holds " +
                                                   std::to_string(capacity));
    const int64_t limit = std::max<int64_t>(m.hparams().n_ctx_train, 1);
    if (int64_t(n_tokens) > limit)
      return fail(HEARTH_ERR_CONTEXT_FULL, "hearth_embed: " + std::to_string(n_tokens) +
                                               " tokens exceed the model's context of " +
                                               std::to_string(limit));
    for (size_t i = 0; i < n_tokens; ++i)
      if (!token_in_range(model, tokens[i]))
        return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_embed: tokens[" + std::to_string(i) +
                                                     "] = " + std::to_string(tokens[i]) +
                                                     " is outside the vocabulary");
    // A private cache and scratch per call keep this safe on a shared model from many threads.
    auto kv = m.new_kv_cache(int64_t(n_tokens));
    if (!kv.is_ok()) return from_status(kv.status(), "hearth_embed");
    ForwardScratch scratch;
    std::vector<float> hidden;
    const std::vector<int32_t> ids(tokens, tokens + n_tokens);
    const std::vector<BatchSegment> segs = {{&kv.value(), 0, int64_t(n_tokens), true}};
    Status st = m.forward_hidden(ids, segs, scratch, &hidden);
    if (!st.is_ok()) return from_status(st, "hearth_embed");
    if (hidden.size() != n_tokens * size_t(dim))
      return fail(HEARTH_ERR_INTERNAL, "hearth_embed: hidden states have an unexpected size");
    std::vector<double> mean(size_t(dim), 0.0);
    for (size_t t = 0; t < n_tokens; ++t)
      for (int64_t i = 0; i < dim; ++i) mean[size_t(i)] += hidden[t * size_t(dim) + size_t(i)];
    double norm = 0;
    for (double& v : mean) {
      v /= double(n_tokens);
      norm += v * v;
    }
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < dim; ++i)
      embedding[i] = norm > 0 ? float(mean[size_t(i)] / norm) : 0.0f;
    return succeed();
  });
}

}  // extern "C"

namespace {
// The template, BOS and EOS text for hearth_chat_render / hearth_chat_tokenize (`fn` names
// the caller in errors). model may be NULL only when chat_template is given.
hearth_status chat_inputs(const hearth_model* model, const char* chat_template,
                          const hearth_chat_message* messages, size_t n_messages, const char* fn,
                          std::string* tmpl, std::string* bos, std::string* eos,
                          std::vector<ChatMessage>* msgs) {
  if (!messages && n_messages > 0)
    return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(fn) + ": messages is NULL");
  if (!model && !chat_template)
    return fail(HEARTH_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": model and chat_template are both NULL");
  for (size_t i = 0; i < n_messages; ++i) {
    if (!messages[i].role || !messages[i].content)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(fn) + ": messages[" + std::to_string(i) +
                                                   "] has a NULL role or content");
    msgs->push_back({messages[i].role, messages[i].content, {}});
  }
  if (model) {
    *bos = model->engine->bos_text();
    *eos = model->engine->eos_text();
  }
  if (chat_template) {
    const auto builtin = builtin_chat_template(chat_template);
    *tmpl = builtin ? std::string(*builtin) : std::string(chat_template);
  } else if (!model->engine->chat_template().empty()) {
    *tmpl = model->engine->chat_template();
  } else {
    // No template in the file: a built-in only when the model's name says which family.
    const auto guess = guess_chat_template_name(model->engine->name(), model->arch_name);
    if (!guess)
      return fail(HEARTH_ERR_NOT_FOUND,
                  std::string(fn) + ": " + model->engine->name() +
                      " has no chat template and its name matches no built-in; pass one");
    *tmpl = std::string(*builtin_chat_template(*guess));
  }
  return succeed();
}
}  // namespace

extern "C" {

hearth_status hearth_chat_render(const hearth_model* model, const char* chat_template,
                                 const hearth_chat_message* messages, size_t n_messages,
                                 int32_t add_generation_prompt, char* text, size_t capacity,
                                 size_t* length) {
  return guarded("hearth_chat_render", [&]() -> hearth_status {
    if (!length) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_render: length is NULL");
    if (!text && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_render: text is NULL");
    std::string tmpl, bos, eos;
    std::vector<ChatMessage> msgs;
    if (hearth_status st = chat_inputs(model, chat_template, messages, n_messages,
                                       "hearth_chat_render", &tmpl, &bos, &eos, &msgs);
        st != HEARTH_OK)
      return st;
    auto out = render_chat_template(tmpl, msgs, add_generation_prompt != 0, bos, eos);
    if (!out.is_ok()) return from_status(out.status(), "hearth_chat_render");
    return copy_string_out(out.value(), text, capacity, length, "hearth_chat_render");
  });
}

hearth_status hearth_chat_tokenize(const hearth_model* model, const char* chat_template,
                                   const hearth_chat_message* messages, size_t n_messages,
                                   int32_t add_generation_prompt, uint32_t flags, int32_t* tokens,
                                   size_t capacity, size_t* n_tokens) {
  return guarded("hearth_chat_tokenize", [&]() -> hearth_status {
    if (!model) return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_tokenize: model is NULL");
    if (!n_tokens)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_tokenize: n_tokens is NULL");
    if (!tokens && capacity > 0)
      return fail(HEARTH_ERR_INVALID_ARGUMENT, "hearth_chat_tokenize: tokens is NULL");
    std::string tmpl, bos, eos;
    std::vector<ChatMessage> msgs;
    if (hearth_status st = chat_inputs(model, chat_template, messages, n_messages,
                                       "hearth_chat_tokenize", &tmpl, &bos, &eos, &msgs);
        st != HEARTH_OK)
      return st;
    const ChatTokenizer chat(model->engine->tokenizer());
    auto ids = chat.tokenize(tmpl, msgs, add_generation_prompt != 0, bos, eos,
                             (flags & HEARTH_CHAT_CONTENT_SPECIAL) != 0);
    if (!ids.is_ok()) return from_status(ids.status(), "hearth_chat_tokenize");
    return copy_out(ids.value().data(), ids.value().size(), tokens, capacity, n_tokens,
                    "hearth_chat_tokenize");
  });
}

}  // extern "C"
