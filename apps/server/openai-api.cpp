// OpenAI request parsing and response building. Every field is type- and range-checked; the
// message names the field (param) the way OpenAI's own errors do.
// New sampling fields go in parse_common(); new response fields in the *_response builders.
#include "openai-api.h"

#include <atomic>
#include <cstring>
#include <random>

#include "base/printable.h"
#include "choices.h"
#include "json-body.h"
#include "logprobs.h"
#include "output-format.h"
#include "runtime/chat/chat-template.h"
#include "runtime/reasoning-split.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

bool invalid_request(ApiError* err, const std::string& param, const std::string& message,
                     const std::string& code) {
  err->status = 400;
  err->type = "invalid_request_error";
  err->param = printable(param);
  err->message = printable(message);  // (it may quote the client's keys and values)
  err->code = code;
  return false;
}

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

bool get_number(const json& j, const char* key, double lo, double hi, double* out, ApiError* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number())
    return invalid_request(err, key, std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    return invalid_request(err, key,
                           std::string("'") + key + "' is " + json_text(*it) +
                               "; it must be between " + json_text(json(lo)) + " and " +
                               json_text(json(hi)));
  *out = v;
  return true;
}

// A boolean field of object j (absent or null: *out untouched); `param` names it in the error
// (a nested field's full path, "stream_options.include_usage").
bool get_bool(const json& j, const char* key, const std::string& param, bool* out, ApiError* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) return invalid_request(err, param, "'" + param + "' must be a boolean");
  *out = it->get<bool>();
  return true;
}

bool get_int(const json& j, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out,
             ApiError* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number_integer())
    return invalid_request(err, key, std::string("'") + key + "' must be an integer");
  // Compare before converting so huge unsigned values cannot wrap (nlohmann parses every
  // non-negative integer as unsigned).
  const bool too_big = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX);
  if (too_big || it->get<int64_t>() > hi || it->get<int64_t>() < lo)
    return invalid_request(err, key,
                           std::string("'") + key + "' is " + json_text(*it) +
                               "; it must be between " + std::to_string(lo) + " and " +
                               std::to_string(hi));
  *out = it->is_number_unsigned() ? int64_t(it->get<uint64_t>()) : it->get<int64_t>();
  return true;
}

bool check_string(const json& v, const std::string& param, size_t max, ApiError* err) {
  if (!v.is_string()) return invalid_request(err, param, "'" + param + "' must be a string");
  if (v.get_ref<const std::string&>().size() > max)
    return invalid_request(err, param,
                           "'" + param + "' is " +
                               std::to_string(v.get_ref<const std::string&>().size()) +
                               " bytes; the limit is " + std::to_string(max));
  return true;
}

// OpenAI fields this server does not implement. A request that sets one to anything but its
// no-op value is refused, naming the field, so no client gets an answer that silently ignored
// it (tools, echo, ...). Implementing one means deleting its row.
struct Unimplemented {
  const char* name;
  bool (*is_noop)(const json&);
};
const Unimplemented kUnimplemented[] = {
    {"functions", [](const json& v) { return v.is_array() && v.empty(); }},
    {"function_call", [](const json& v) { return v == "none" || v == "auto"; }},
    {"echo", [](const json& v) { return v == false; }},
    {"best_of", [](const json& v) { return v == 1; }},
    {"suffix", [](const json& v) { return v == ""; }},
    {"modalities", [](const json& v) { return v == json::array({"text"}); }},
    {"audio", [](const json&) { return false; }},
    {"prediction", [](const json&) { return false; }},
    // Samplers of llama-server's and vLLM's extensions that this server does not run (its
    // `repeat_penalty` / `repeat_last_n` it does; vLLM's `repetition_penalty` counts prompt and
    // answer alike, a different window).
    {"repetition_penalty", [](const json& v) { return v == 1; }},
    {"mirostat", [](const json& v) { return v == 0; }},
    {"typical_p", [](const json& v) { return v == 1; }},
    {"tfs_z", [](const json& v) { return v == 1; }},
    {"dynatemp_range", [](const json& v) { return v == 0; }},
    {"xtc_probability", [](const json& v) { return v == 0; }},
    {"dry_multiplier", [](const json& v) { return v == 0; }},
};

bool reject_unimplemented(const json& j, ApiError* err) {
  for (const auto& u : kUnimplemented) {
    auto it = j.find(u.name);
    if (it == j.end() || it->is_null() || u.is_noop(*it)) continue;
    return invalid_request(err, u.name,
                           std::string("'") + u.name + "' is not supported by this server",
                           "unsupported_field");
  }
  return true;
}

// The body as a JSON object, or a 400 saying why not.
bool parse_body(const std::string& body, const ApiConfig& cfg, json* j, ApiError* err) {
  std::string why;
  if (parse_json_object(body, cfg.json_limits, j, &why)) return true;
  return invalid_request(err, "", why, "invalid_json");
}

// Sampling, length and stop fields shared by both completion endpoints.
bool parse_common(const json& j, const ApiConfig& cfg, Job* job, std::optional<int64_t>* max_tokens,
                  ApiError* err) {
  SamplingParams& s = job->generate.sampling;
  s = cfg.defaults;
  double v = s.temperature;
  if (!get_number(j, "temperature", 0, 2, &v, err)) return false;
  s.temperature = float(v);
  v = s.top_p;
  if (!get_number(j, "top_p", 0, 1, &v, err)) return false;
  s.top_p = float(v);
  v = s.min_p;
  if (!get_number(j, "min_p", 0, 1, &v, err)) return false;
  s.min_p = float(v);
  v = s.presence_penalty;
  if (!get_number(j, "presence_penalty", -2, 2, &v, err)) return false;
  s.presence_penalty = float(v);
  v = s.frequency_penalty;
  if (!get_number(j, "frequency_penalty", -2, 2, &v, err)) return false;
  s.frequency_penalty = float(v);
  // llama-server's repetition penalty: 1 is off; the window is the last repeat_last_n tokens
  // (-1: all), as `hearth run --repeat-penalty / --repeat-last-n` and Ollama's options.
  v = s.repeat_penalty;
  if (!get_number(j, "repeat_penalty", 0, 10, &v, err)) return false;
  if (!(v > 0))
    return invalid_request(err, "repeat_penalty",
                           "'repeat_penalty' must be above 0 (1 turns it off)");
  s.repeat_penalty = float(v);
  std::optional<int64_t> iv;
  if (!get_int(j, "repeat_last_n", -1, 1 << 20, &iv, err)) return false;
  if (iv) s.repeat_last_n = int32_t(*iv);
  iv.reset();
  if (!get_int(j, "top_k", 0, 1 << 20, &iv, err)) return false;
  if (iv) s.top_k = int32_t(*iv);
  iv.reset();
  if (!get_int(j, "seed", INT64_MIN, INT64_MAX, &iv, err)) return false;
  if (iv) s.seed = uint64_t(*iv) == 0xFFFFFFFFull ? 0xFFFFFFFEull : uint64_t(*iv);
  iv.reset();
  if (!get_int(j, "max_completion_tokens", 1, INT32_MAX, max_tokens, err)) return false;
  if (!get_int(j, "max_tokens", 1, INT32_MAX, max_tokens, err)) return false;
  if (!get_bool(j, "ignore_eos", "ignore_eos", &job->generate.ignore_eos, err)) return false;
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    json list = it->is_array() ? *it : json::array({*it});
    if (list.size() > cfg.limits.max_stop)
      return invalid_request(err, "stop",
                             "'stop' has " + std::to_string(list.size()) +
                                 " entries; the limit is " + std::to_string(cfg.limits.max_stop));
    for (const auto& s : list) {
      if (!check_string(s, "stop", cfg.limits.max_stop_bytes, err)) return false;
      if (!s.get_ref<const std::string&>().empty())
        job->generate.stop.push_back(s.get<std::string>());
    }
  }
  return true;
}

// Chat: `logprobs` true/false and `top_logprobs` 0..20 (which needs logprobs). Completions (the
// legacy API): `logprobs` an integer 0..5, the number of alternatives; 0 gives only the chosen
// tokens' logprobs.
bool parse_logprobs(const json& j, bool chat, Job* job, ApiError* err) {
  auto lp = j.find("logprobs");
  const bool lp_set = lp != j.end() && !lp->is_null();
  if (!chat) {
    if (auto tl = j.find("top_logprobs"); tl != j.end() && !tl->is_null())
      return invalid_request(
          err, "top_logprobs",
          "'top_logprobs' is a chat field; completions take 'logprobs' as a number");
    std::optional<int64_t> n;
    if (lp_set && lp->is_boolean())
      return invalid_request(err, "logprobs",
                             "'logprobs' must be an integer from 0 to 5 on completions");
    if (!get_int(j, "logprobs", 0, kMaxLegacyLogprobs, &n, err)) return false;
    if (n) job->logprobs_top = int32_t(*n);
    return true;
  }
  if (lp_set && !lp->is_boolean())
    return invalid_request(err, "logprobs", "'logprobs' must be a boolean");
  const bool on = lp_set && lp->get<bool>();
  std::optional<int64_t> top;
  if (!get_int(j, "top_logprobs", 0, kMaxTopLogprobs, &top, err)) return false;
  if (top && !on)
    return invalid_request(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  if (on) job->logprobs_top = int32_t(top.value_or(0));
  return true;
}

// `logit_bias`: {"token id": bias} with biases in [-100, 100], added to the logits before
// sampling (OpenAI's semantics: -100 bans a token in effect, 100 makes it the only choice).
bool parse_logit_bias(const json& j, const Engine& engine, const ApiLimits& limits, Job* job,
                      ApiError* err) {
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_object())
    return invalid_request(err, "logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (it->size() > limits.max_logit_bias)
    return invalid_request(err, "logit_bias",
                           "'logit_bias' has " + std::to_string(it->size()) +
                               " entries; the limit is " + std::to_string(limits.max_logit_bias));
  const int64_t n_vocab = engine.model().hparams().n_vocab;
  for (auto e = it->begin(); e != it->end(); ++e) {
    const std::string& key = e.key();
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(key) >= n_vocab)
      return invalid_request(err, "logit_bias",
                             "'logit_bias' has the key " + json_text(json(key)) +
                                 ", which is not a token id (0.." + std::to_string(n_vocab - 1) +
                                 ")");
    if (!e->is_number() || !(e->get<double>() >= -100 && e->get<double>() <= 100))
      return invalid_request(
          err, "logit_bias",
          "'logit_bias' for token " + key + " must be a number from -100 to 100");
    job->generate.logit_bias.emplace_back(int32_t(std::stoll(key)), e->get<float>());
  }
  return true;
}

bool parse_token_ids(const json& arr, const Engine& engine, const std::string& param,
                     std::vector<int32_t>* out, ApiError* err) {
  const int64_t n_vocab = engine.model().hparams().n_vocab;
  for (const auto& t : arr) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
      return invalid_request(err, param,
                             "'" + param + "' holds " + json_text(t) +
                                 ", which is not a token id (0.." + std::to_string(n_vocab - 1) +
                                 ")");
    out->push_back(int32_t(t.get<int64_t>()));
  }
  return true;
}

// Message content: a string, null, or an array of {"type":"text","text":...} parts.
bool message_text(const json& content, size_t index, const ApiLimits& limits, std::string* out,
                  ApiError* err) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return true;
  if (content.is_string()) {
    if (!check_string(content, param, limits.max_string_bytes, err)) return false;
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array())
    return invalid_request(err, param, "'" + param + "' must be a string or an array");
  for (const auto& part : content) {
    // (compared as JSON: value("type", "") would throw on a non-string type, a 500)
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text"))
      return invalid_request(err, param,
                             "'" + param + "' may only hold text parts ({\"type\":\"text\"})");
    if (!check_string(part["text"], param, limits.max_string_bytes, err)) return false;
    *out += part["text"].get<std::string>();
  }
  return true;
}

// The conversation as template messages, tool turns in the given shape.
bool chat_messages(const json& list, const ApiConfig& cfg, const ToolTurnShape& shape,
                   std::vector<ChatMessage>* messages, ApiError* err) {
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_request(err, p, "'" + p + "' must be an object");
    if (!m.contains("role"))
      return invalid_request(err, p + ".role", "'" + p + ".role' is required");
    if (!check_string(m["role"], p + ".role", 64, err)) return false;
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (!message_text(m.value("content", json(nullptr)), i, cfg.limits, &msg.content, err))
      return false;
    if (!message_tool_fields(m, i, shape, &msg, err)) return false;
    messages->push_back(std::move(msg));
  }
  return true;
}

bool chat_prompt(const json& j, const ApiConfig& cfg, const Engine& engine, const ToolUse& tools,
                 std::vector<int32_t>* prompt, ApiError* err) {
  auto it = j.find("messages");
  if (it == j.end()) return invalid_request(err, "messages", "'messages' is required");
  if (!it->is_array() || it->empty())
    return invalid_request(err, "messages", "'messages' must be a non-empty array");
  if (it->size() > cfg.limits.max_messages)
    return invalid_request(err, "messages",
                           "'messages' has " + std::to_string(it->size()) +
                               " entries; the limit is " + std::to_string(cfg.limits.max_messages));
  if (cfg.chat_template.empty())
    return invalid_request(err, "messages", "this model has no chat template; use /v1/completions");
  std::vector<std::pair<std::string, json>> vars;
  if (!tools.tools.is_null()) vars.emplace_back("tools", tools.tools);
  family_template_variables(tools, &vars);
  jinja::Variables extra;
  for (const auto& [name, v] : vars) {
    auto value = json_to_value(json_text(v), name);
    if (!value) return invalid_request(err, "tools", "'tools': " + value.message());
    extra.emplace_back(name, std::move(value.value()));
  }
  // Tool turns go in the shape most templates take first, then in the others (tool-calls-api.h).
  Result<std::vector<int32_t>> tokens = Status::error("no render");
  for (const ToolTurnShape& shape :
       tool_turn_shapes(*it, detect_tool_call_family(cfg.chat_template))) {
    std::vector<ChatMessage> messages;
    if (!chat_messages(*it, cfg, shape, &messages, err)) return false;
    // The template writes BOS itself; special-token texts are control tokens in its own text
    // only (and in messages too for servers started with --special-tokens-in-content).
    auto attempt =
        cfg.chat_tokenizer->tokenize(cfg.chat_template, messages, true, engine.bos_text(),
                                     engine.eos_text(), cfg.special_tokens_in_content, extra);
    const bool first = !tokens.is_ok() && tokens.message() == "no render";
    if (attempt.is_ok() || first) tokens = std::move(attempt);  // the first failure is reported
    if (tokens.is_ok()) break;
  }
  if (!tokens.is_ok())
    return invalid_request(err, "messages", "the chat template failed: " + tokens.message());
  *prompt = std::move(tokens.value());
  return true;
}

bool completion_prompt(const json& j, const ApiConfig& cfg, const Engine& engine,
                       std::vector<int32_t>* prompt, ApiError* err) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) return invalid_request(err, "prompt", "'prompt' is required");
  json p = *it;
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    if (!check_string(p, "prompt", cfg.limits.max_string_bytes, err)) return false;
    *prompt = engine.tokenizer().encode(p.get_ref<const std::string&>(), /*add_special=*/true);
    return true;
  }
  if (p.is_array() && !p.empty() && p[0].is_number_integer())
    return parse_token_ids(p, engine, "prompt", prompt, err);
  return invalid_request(
      err, "prompt", "'prompt' must be a string or an array of token ids (one prompt per request)");
}

// `reasoning_format` (llama-server's field): "auto" (the default) splits a think block into
// reasoning_content, "deepseek" is llama-server's name for the same, "none" keeps it in content.
bool parse_reasoning_format(const json& j, bool* split, ApiError* err) {
  *split = true;
  auto it = j.find("reasoning_format");
  if (it == j.end() || it->is_null()) return true;
  if (*it != "auto" && *it != "deepseek" && *it != "none")
    return invalid_request(
        err, "reasoning_format",
        "'reasoning_format' must be \"auto\" or \"none\"; it is " + json_text(*it));
  *split = *it != "none";
  return true;
}

}  // namespace

std::optional<CompletionRequest> parse_completion(const ApiConfig& cfg, const Engine& engine,
                                                  const std::string& body, bool chat,
                                                  ApiError* err) {
  json j;
  if (!parse_body(body, cfg, &j, err) || !reject_unimplemented(j, err)) return std::nullopt;
  CompletionRequest req;
  req.chat = chat;
  req.job = std::make_shared<Job>();
  Job& job = *req.job;
  if (auto it = j.find("model"); it != j.end() && !check_string(*it, "model", 256, err))
    return std::nullopt;
  if (!get_bool(j, "stream", "stream", &req.stream, err)) return std::nullopt;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      return invalid_request(err, "stream_options", "'stream_options' must be an object"),
             std::nullopt;
    if (!get_bool(*it, "include_usage", "stream_options.include_usage", &req.include_usage, err))
      return std::nullopt;
  }
  std::optional<int64_t> max_tokens;
  if (!parse_common(j, cfg, &job, &max_tokens, err) || !parse_logprobs(j, chat, &job, err) ||
      !parse_logit_bias(j, engine, cfg.limits, &job, err) ||
      !parse_output_format(j, cfg.limits, engine, &job, err))
    return std::nullopt;
  if (chat) {
    if (!parse_reasoning_format(j, &req.split_reasoning, err) ||
        !parse_tool_request(j, cfg, engine, &job, &req.tools, err) ||
        !chat_prompt(j, cfg, engine, req.tools, &job.prompt, err))
      return std::nullopt;
    for (const auto& s : cfg.chat_stops) job.generate.stop.push_back(s);
  } else {
    for (const char* chat_only : {"tools", "tool_choice", "parallel_tool_calls"})
      if (auto it = j.find(chat_only); it != j.end() && !it->is_null())
        return invalid_request(
                   err, chat_only,
                   std::string("'") + chat_only + "' is a chat field; use /v1/chat/completions"),
               std::nullopt;
    if (!completion_prompt(j, cfg, engine, &job.prompt, err)) return std::nullopt;
  }
  const int64_t n_prompt = int64_t(job.prompt.size());
  // The prompt's last few tokens decoded: does the template open the think block itself?
  const size_t tail = std::min<size_t>(job.prompt.size(), 16);
  req.reasoning_starts_inside = prompt_opens_reasoning(engine.tokenizer().decode(
      std::vector<int32_t>(job.prompt.end() - int64_t(tail), job.prompt.end())));
  // A required call's grammar starts the output with the call, not inside a think block that
  // the prompt opened (DeepSeek-R1's template ends with "<think>\n").
  if (req.tools.required) req.reasoning_starts_inside = false;
  if (n_prompt == 0)
    return invalid_request(err, chat ? "messages" : "prompt", "the prompt is empty"), std::nullopt;
  const std::string param = chat ? "messages" : "prompt";
  if (n_prompt >= cfg.ctx_size) {
    invalid_request(err, param,
                    "This model's maximum context length is " + std::to_string(cfg.ctx_size) +
                        " tokens, but the prompt has " + std::to_string(n_prompt) +
                        " tokens (at least one token must be left for the completion).",
                    "context_length_exceeded");
    err->fallback_reason = "context-length";
    return std::nullopt;
  }
  if (max_tokens && n_prompt + *max_tokens > cfg.ctx_size) {
    invalid_request(
        err, "max_tokens",
        "This model's maximum context length is " + std::to_string(cfg.ctx_size) +
            " tokens. However, you requested " + std::to_string(n_prompt + *max_tokens) +
            " tokens (" + std::to_string(n_prompt) + " in the prompt, " +
            std::to_string(*max_tokens) + " for the completion). Reduce the prompt or max_tokens.",
        "context_length_exceeded");
    err->fallback_reason = "context-length";
    return std::nullopt;
  }
  job.generate.max_tokens = int32_t(max_tokens ? *max_tokens : cfg.ctx_size - n_prompt);
  if (!expand_choices(j, cfg, engine, &req, err)) return std::nullopt;
  return req;
}

std::shared_ptr<Job> parse_embeddings(const ApiConfig& cfg, const Engine& engine,
                                      const std::string& body, bool* base64, ApiError* err) {
  json j;
  if (!parse_body(body, cfg, &j, err)) return nullptr;
  if (auto it = j.find("model"); it != j.end() && !check_string(*it, "model", 256, err))
    return nullptr;
  *base64 = false;
  if (auto it = j.find("encoding_format"); it != j.end() && !it->is_null()) {
    if (*it != "float" && *it != "base64")
      return invalid_request(err, "encoding_format",
                             "'encoding_format' must be \"float\" or \"base64\""),
             nullptr;
    *base64 = *it == "base64";
  }
  if (auto it = j.find("dimensions");
      it != j.end() && !it->is_null() && *it != engine.model().hparams().n_embd)
    return invalid_request(err, "dimensions",
                           "'dimensions' must be " +
                               std::to_string(engine.model().hparams().n_embd) + " for this model"),
           nullptr;
  auto it = j.find("input");
  if (it == j.end() || it->is_null())
    return invalid_request(err, "input", "'input' is required"), nullptr;
  auto job = std::make_shared<Job>();
  job->kind = Job::Kind::kEmbed;
  json list;
  if (it->is_string() || (it->is_array() && !it->empty() && (*it)[0].is_number_integer()))
    list = json::array({*it});
  else if (it->is_array())
    list = *it;
  else
    return invalid_request(err, "input",
                           "'input' must be a string, an array of strings or of token ids"),
           nullptr;
  if (list.empty()) return invalid_request(err, "input", "'input' must not be empty"), nullptr;
  if (list.size() > cfg.limits.max_embedding_inputs)
    return invalid_request(err, "input",
                           "'input' has " + std::to_string(list.size()) +
                               " entries; the limit is " +
                               std::to_string(cfg.limits.max_embedding_inputs)),
           nullptr;
  for (size_t i = 0; i < list.size(); ++i) {
    std::vector<int32_t> ids;
    if (list[i].is_string()) {
      if (!check_string(list[i], "input", cfg.limits.max_string_bytes, err)) return nullptr;
      if (list[i].get_ref<const std::string&>().empty())
        return invalid_request(err, "input",
                               "'input[" + std::to_string(i) + "]' is an empty string"),
               nullptr;
      ids = engine.tokenizer().encode(list[i].get_ref<const std::string&>(), true);
    } else if (list[i].is_array() && !list[i].empty()) {
      if (!parse_token_ids(list[i], engine, "input", &ids, err)) return nullptr;
    } else {
      return invalid_request(err, "input",
                             "'input[" + std::to_string(i) + "]' must be a string or token ids"),
             nullptr;
    }
    if (int64_t(ids.size()) > cfg.ctx_size) {
      invalid_request(err, "input",
                      "'input[" + std::to_string(i) + "]' has " + std::to_string(ids.size()) +
                          " tokens; this model's maximum context length is " +
                          std::to_string(cfg.ctx_size),
                      "context_length_exceeded");
      err->fallback_reason = "context-length";
      return nullptr;
    }
    job->inputs.push_back(std::move(ids));
  }
  return job;
}

std::string new_request_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%08llx%08llx", prefix, (unsigned long long)(salt & 0xffffffff),
                (unsigned long long)(++counter));
  return buf;
}

const char* api_finish_reason(const Job& job) {
  return job.finish_reason() == "length" ? "length" : "stop";
}

ChatAnswer chat_answer(const CompletionRequest& req, const std::string& text) {
  ChatAnswer out;
  if (req.split_reasoning) {
    ReasoningPieces pieces = split_reasoning(text, req.reasoning_starts_inside);
    out.reasoning = std::move(pieces.reasoning);
    out.content = std::move(pieces.content);
  } else {
    out.content = text;
  }
  ToolCallParse parsed = answer_tool_calls(req.tools, out.content);
  out.content = std::move(parsed.content);
  out.calls = std::move(parsed.calls);
  return out;
}

json stream_logprobs(const CompletionRequest& req, const std::vector<TokenLogprob>& tokens,
                     size_t* text_offset) {
  if (req.job->logprobs_top < 0 || tokens.empty()) return nullptr;
  return req.chat ? chat_logprobs_json(tokens) : completion_logprobs_json(tokens, text_offset);
}

json usage_json(const CompletionRequest& req) {
  const Job& first = *req.job;
  int64_t completion = 0;
  for (const auto& c : req.choices) completion += c->completion_tokens();
  return json{{"prompt_tokens", first.prompt_tokens()},
              {"completion_tokens", completion},
              {"total_tokens", first.prompt_tokens() + completion},
              {"prompt_tokens_details", {{"cached_tokens", first.cached_tokens()}}}};
}

static json completion_choice(const CompletionRequest& req, const Job& job, size_t index,
                              const std::string& text) {
  json choice = {
      {"index", index}, {"finish_reason", api_finish_reason(job)}, {"logprobs", nullptr}};
  if (job.logprobs_top >= 0) {
    size_t text_offset = 0;
    choice["logprobs"] = req.chat ? chat_logprobs_json(job.logprobs())
                                  : completion_logprobs_json(job.logprobs(), &text_offset);
  }
  if (req.chat) {
    ChatAnswer answer = chat_answer(req, text);
    choice["message"] = {{"role", "assistant"}, {"content", answer.content}};
    if (!answer.reasoning.empty()) choice["message"]["reasoning_content"] = answer.reasoning;
    if (!answer.calls.empty()) {
      // OpenAI sends null content on a call-only turn.
      if (answer.content.find_first_not_of(" \n\r\t") == std::string::npos)
        choice["message"]["content"] = nullptr;
      choice["message"]["tool_calls"] = openai_tool_calls(answer.calls);
      choice["finish_reason"] = "tool_calls";
    }
  } else
    choice["text"] = text;
  return choice;
}

json completion_response(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                         int64_t created, const std::vector<std::string>& texts) {
  json choices = json::array();
  for (size_t i = 0; i < req.choices.size(); ++i)
    choices.push_back(completion_choice(req, *req.choices[i], i, texts[i]));
  return json{{"id", id},           {"object", req.chat ? "chat.completion" : "text_completion"},
              {"created", created}, {"model", cfg.model_id},
              {"choices", choices}, {"usage", usage_json(req)}};
}

json completion_chunk(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                      int64_t created, const std::string& text, const char* finish_reason,
                      bool first, const json& logprobs, const std::string& reasoning,
                      const json& tool_calls, size_t index) {
  json choice = {{"index", index}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  if (req.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!tool_calls.is_null()) delta["tool_calls"] = tool_calls;
    if (!text.empty() || (!finish_reason && reasoning.empty() && tool_calls.is_null()))
      delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", id},
                {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", cfg.model_id},
                {"choices", json::array({choice})}};
  if (req.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                 int64_t created) {
  return json{{"id", id},
              {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", cfg.model_id},
              {"choices", json::array()},
              {"usage", usage_json(req)}};
}

static std::string base64_encode(const uint8_t* data, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t(data[i]) << 16) | (i + 1 < n ? uint32_t(data[i + 1]) << 8 : 0) |
                       (i + 2 < n ? uint32_t(data[i + 2]) : 0);
    out += k[(b >> 18) & 63];
    out += k[(b >> 12) & 63];
    out += i + 1 < n ? k[(b >> 6) & 63] : '=';
    out += i + 2 < n ? k[b & 63] : '=';
  }
  return out;
}

json embeddings_response(const Job& job, const ApiConfig& cfg, bool base64) {
  json data = json::array();
  for (size_t i = 0; i < job.embeddings().size(); ++i) {
    const auto& v = job.embeddings()[i];
    json e = {{"object", "embedding"}, {"index", i}};
    // Little-endian float32 bytes, as OpenAI's base64 format is (x86 and arm64 hosts are LE).
    if (base64)
      e["embedding"] = base64_encode(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
    else
      e["embedding"] = v;
    data.push_back(std::move(e));
  }
  return json{
      {"object", "list"},
      {"data", data},
      {"model", cfg.model_id},
      {"usage", {{"prompt_tokens", job.prompt_tokens()}, {"total_tokens", job.prompt_tokens()}}}};
}

json models_response(const ApiConfig& cfg, int64_t created) {
  return json{{"object", "list"},
              {"data", json::array({{{"id", cfg.model_id},
                                     {"object", "model"},
                                     {"created", created},
                                     {"owned_by", "hearth"},
                                     {"context_length", cfg.ctx_size}}})}};
}

}  // namespace hearth::server
