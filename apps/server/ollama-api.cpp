// Ollama request checking and translation, and Ollama's response documents. The OpenAI parser
// (openai-api.cpp) does the work both APIs share; its errors come back with the Ollama field's
// name (options.temperature, options.num_predict) in the message.
#include "ollama-api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "base/printable.h"
#include "json-body.h"
#include "runtime/reasoning-split.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

using SteadyClock = std::chrono::steady_clock;

json ollama_error_body(const OllamaError& e) {
  return json{{"error", e.message}};
}

namespace {

// (messages quote the client's field names and values: one printable line each)
bool fail(OllamaError* err, const std::string& message, int status = 400) {
  err->status = status;
  err->message = printable(message);
  return false;
}

// What a field of an Ollama body is to this server.
enum class Field {
  kCopy,     // passed to the OpenAI parser under another (or the same) name
  kOwn,      // read here
  kIgnored,  // only steers Ollama's model loading (this server's model is always loaded)
};
struct FieldRow {
  const char* name;
  Field kind;
  const char* openai_name;  // kCopy only
};

// Top-level fields of /api/generate and /api/chat. Images, templates and suffixes need engines
// this branch does not have: they are refused by check_unsupported(). `tools` (chat) is OpenAI's.
const FieldRow kGenerateFields[] = {
    {"model", Field::kCopy, "model"},       {"stream", Field::kOwn, nullptr},
    {"options", Field::kOwn, nullptr},      {"keep_alive", Field::kIgnored, nullptr},
    {"format", Field::kOwn, nullptr},       {"think", Field::kOwn, nullptr},
    {"prompt", Field::kOwn, nullptr},       {"system", Field::kOwn, nullptr},
    {"raw", Field::kOwn, nullptr},          {"context", Field::kOwn, nullptr},
    {"suffix", Field::kOwn, nullptr},       {"images", Field::kOwn, nullptr},
    {"template", Field::kOwn, nullptr},     {"logprobs", Field::kOwn, nullptr},
    {"top_logprobs", Field::kOwn, nullptr},
};
const FieldRow kChatFields[] = {
    {"model", Field::kCopy, "model"},   {"stream", Field::kOwn, nullptr},
    {"options", Field::kOwn, nullptr},  {"keep_alive", Field::kIgnored, nullptr},
    {"format", Field::kOwn, nullptr},   {"think", Field::kOwn, nullptr},
    {"messages", Field::kOwn, nullptr}, {"tools", Field::kOwn, nullptr},
    {"logprobs", Field::kOwn, nullptr}, {"top_logprobs", Field::kOwn, nullptr},
};
const FieldRow kEmbedFields[] = {
    {"model", Field::kCopy, "model"},         {"input", Field::kOwn, nullptr},
    {"prompt", Field::kOwn, nullptr},         {"truncate", Field::kOwn, nullptr},
    {"dimensions", Field::kOwn, nullptr},     {"options", Field::kOwn, nullptr},
    {"keep_alive", Field::kIgnored, nullptr},
};

// `options` keys. Sampling keys map to OpenAI fields (or are applied here); runner keys that
// cannot change the output of an already loaded model are accepted; sampler stages Hearth has
// not got (mirostat, typical_p, tfs_z) are refused unless set to their off value.
const FieldRow kOptionFields[] = {
    {"temperature", Field::kCopy, "temperature"},
    {"top_k", Field::kCopy, "top_k"},
    {"top_p", Field::kCopy, "top_p"},
    {"min_p", Field::kCopy, "min_p"},
    {"seed", Field::kCopy, "seed"},
    {"presence_penalty", Field::kCopy, "presence_penalty"},
    {"frequency_penalty", Field::kCopy, "frequency_penalty"},
    {"stop", Field::kCopy, "stop"},
    {"num_predict", Field::kOwn, nullptr},
    {"repeat_penalty", Field::kOwn, nullptr},
    {"repeat_last_n", Field::kOwn, nullptr},
    {"num_ctx", Field::kOwn, nullptr},
    {"typical_p", Field::kOwn, nullptr},
    {"tfs_z", Field::kOwn, nullptr},
    {"mirostat", Field::kOwn, nullptr},
    {"mirostat_tau", Field::kIgnored, nullptr},  // only read when mirostat is on
    {"mirostat_eta", Field::kIgnored, nullptr},
    {"num_keep", Field::kIgnored, nullptr},
    {"num_batch", Field::kIgnored, nullptr},
    {"num_gpu", Field::kIgnored, nullptr},
    {"main_gpu", Field::kIgnored, nullptr},
    {"num_thread", Field::kIgnored, nullptr},
    {"numa", Field::kIgnored, nullptr},
    {"low_vram", Field::kIgnored, nullptr},
    {"f16_kv", Field::kIgnored, nullptr},
    {"use_mmap", Field::kIgnored, nullptr},
    {"use_mlock", Field::kIgnored, nullptr},
    {"vocab_only", Field::kIgnored, nullptr},
};

template <size_t N>
const FieldRow* find_row(const FieldRow (&rows)[N], const std::string& key) {
  for (const auto& r : rows)
    if (key == r.name) return &r;
  return nullptr;
}

// Refuses keys no row names; copies kCopy fields into *openai under their OpenAI names.
template <size_t N>
bool check_fields(const json& j, const FieldRow (&rows)[N], const std::string& prefix, json* openai,
                  OllamaError* err) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const FieldRow* row = find_row(rows, it.key());
    if (!row) return fail(err, "'" + prefix + it.key() + "' is not supported by this server");
    if (row->kind == Field::kCopy && !it->is_null()) (*openai)[row->openai_name] = *it;
  }
  return true;
}

// OpenAI field names in the shared parser's errors, as the Ollama client wrote them.
std::string ollama_param(const std::string& openai_param) {
  if (openai_param == "max_tokens") return "options.num_predict";
  if (openai_param.starts_with("response_format")) return "format";
  for (const auto& r : kOptionFields)
    if (r.openai_name && openai_param == r.openai_name) return std::string("options.") + r.name;
  return openai_param;
}

std::string quoted(const std::string& name) {
  std::string q(1, '\'');
  q += name;
  q += '\'';
  return q;
}

bool from_api_error(const ApiError& e, OllamaError* err) {
  std::string message = e.message;
  if (!e.param.empty()) {
    const std::string from = quoted(e.param), to = quoted(ollama_param(e.param));
    for (size_t at = message.find(from); at != std::string::npos;
         at = message.find(from, at + to.size()))
      message.replace(at, from.size(), to);
    if (message.find(to) == std::string::npos) message = to + ": " + message;
  }
  return fail(err, message, e.status);
}

bool is_int_in(const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned())
    return hi >= 0 && v.get<uint64_t>() <= uint64_t(hi) && int64_t(v.get<uint64_t>()) >= lo;
  return v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

// Options applied after the OpenAI parser made the job.
struct OwnOptions {
  std::optional<int64_t> num_predict;  // > 0: a limit; -1, -2: until the context is full
  std::optional<float> repeat_penalty;
  std::optional<int32_t> repeat_last_n;
};

bool read_options(const json& j, const ApiConfig& cfg, json* openai, OwnOptions* own,
                  OllamaError* err) {
  auto it = j.find("options");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_object()) return fail(err, "'options' must be an object");
  const json& o = *it;
  if (!check_fields(o, kOptionFields, "options.", openai, err)) return false;
  auto get = [&](const char* k) -> const json* {
    auto f = o.find(k);
    return f == o.end() || f->is_null() ? nullptr : &*f;
  };
  if (const json* v = get("num_predict")) {
    if (!is_int_in(*v, -2, INT32_MAX) || *v == 0)
      return fail(err,
                  "'options.num_predict' must be a positive integer, -1 (no limit) or -2 "
                  "(fill the context)");
    if (v->get<int64_t>() > 0) (*openai)["max_tokens"] = *v;
    own->num_predict = v->get<int64_t>();
  }
  if (const json* v = get("repeat_penalty")) {
    if (!v->is_number() || !(v->get<double>() > 0 && v->get<double>() <= 10))
      return fail(err, "'options.repeat_penalty' must be a number in (0, 10]");
    own->repeat_penalty = v->get<float>();
  }
  if (const json* v = get("repeat_last_n")) {
    if (!is_int_in(*v, -1, 1 << 20))
      return fail(err, "'options.repeat_last_n' must be an integer from -1 (all) to 1048576");
    own->repeat_last_n = int32_t(v->get<int64_t>());
  }
  if (const json* v = get("num_ctx")) {
    // The slots' context is fixed at start; a request asking for no more than it is satisfied.
    if (!is_int_in(*v, 1, cfg.ctx_size))
      return fail(err, "'options.num_ctx' is " + json_text(*v) + "; this server's context is " +
                           std::to_string(cfg.ctx_size) +
                           " tokens (start it with a larger "
                           "--ctx-size)");
  }
  // Sampler stages Hearth does not have: only their off values are accepted.
  const std::pair<const char*, double> off_values[] = {
      {"typical_p", 1.0}, {"tfs_z", 1.0}, {"mirostat", 0.0}};
  for (const auto& [name, off] : off_values)
    if (const json* v = get(name); v && !(v->is_number() && v->get<double>() == off))
      return fail(err, std::string("'options.") + name +
                           "' is not supported by this server (only " + json_text(json(off)) +
                           ", off)");
  return true;
}

// Fields of engines this branch has not got: refused unless empty or off.
bool check_unsupported(const json& j, OllamaError* err) {
  auto set = [&](const char* k) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return false;
    if (it->is_string() || it->is_array() || it->is_object()) return !it->empty();
    return *it != false;
  };
  for (const char* k : {"images", "template", "suffix"})
    if (set(k)) return fail(err, std::string("'") + k + "' is not supported by this server");
  if (set("logprobs") || set("top_logprobs"))
    return fail(err, "'logprobs' is not supported on the Ollama routes of this server");
  return true;
}

// `format`: "json" (any JSON object) or a JSON Schema object, as OpenAI's response_format
// (json_object / json_schema), which the OpenAI parser compiles; "" or null: plain text.
bool read_format(const json& j, json* openai, OllamaError* err) {
  auto it = j.find("format");
  if (it == j.end() || it->is_null() || *it == "") return true;
  if (*it == "json") {
    (*openai)["response_format"] = {{"type", "json_object"}};
    return true;
  }
  if (!it->is_object())
    return fail(err, "'format' must be \"json\" or a JSON Schema object; it is " + json_text(*it));
  (*openai)["response_format"] = {{"type", "json_schema"},
                                  {"json_schema", {{"name", "format"}, {"schema", *it}}}};
  return true;
}

bool read_bool(const json& j, const char* key, bool* out, OllamaError* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) return fail(err, std::string("'") + key + "' must be a boolean");
  *out = it->get<bool>();
  return true;
}

bool read_string(const json& j, const char* key, std::string* out, OllamaError* err) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) return fail(err, std::string("'") + key + "' must be a string");
  *out = it->get<std::string>();
  return true;
}

// Ollama's tool calls in a message -> OpenAI's, each given an id ("call_<n>") that the tool
// results after it refer to by the function's name (Ollama's tool_name).
bool translate_tool_calls(const json& calls, const std::string& p, json* out,
                          std::vector<std::pair<std::string, std::string>>* ids, OllamaError* err) {
  if (!calls.is_array()) return fail(err, "'" + p + ".tool_calls' must be an array");
  *out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string cp = p + ".tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].value("name", json()).is_string())
      return fail(err, "'" + cp + ".function' must be an object with a string 'name'");
    const std::string id = "call_" + std::to_string(ids->size());
    ids->emplace_back(c["function"]["name"].get<std::string>(), id);
    out->push_back({{"id", id},
                    {"type", "function"},
                    {"function",
                     {{"name", c["function"]["name"]},
                      {"arguments", c["function"].value("arguments", json::object())}}}});
  }
  return true;
}

// Ollama chat messages -> OpenAI messages (text, tool calls and tool results; images refused).
bool chat_messages(const json& j, json* openai, bool* empty, OllamaError* err) {
  auto it = j.find("messages");
  if (it == j.end() || it->is_null() || (it->is_array() && it->empty())) {
    *empty = true;
    return true;
  }
  if (!it->is_array()) return fail(err, "'messages' must be an array");
  json out = json::array();
  std::vector<std::pair<std::string, std::string>> call_ids;  // function name -> call id
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return fail(err, "'" + p + "' must be an object");
    for (auto f = m.begin(); f != m.end(); ++f) {
      const std::string& k = f.key();
      if (k == "role" || k == "content" || k == "tool_calls" || k == "tool_name") continue;
      const bool empty_value = f->is_null() || ((f->is_array() || f->is_string()) && f->empty());
      if ((k == "images" || k == "thinking") && empty_value) continue;
      return fail(err, "'" + p + "." + k + "' is not supported by this server");
    }
    if (!m.contains("role") || !m["role"].is_string())
      return fail(err, "'" + p + ".role' is required and must be a string");
    const json content = m.value("content", json(""));
    if (!content.is_string()) return fail(err, "'" + p + ".content' must be a string");
    json msg = {{"role", m["role"]}, {"content", content}};
    if (auto calls = m.find("tool_calls");
        calls != m.end() && !calls->is_null() && !(calls->is_array() && calls->empty())) {
      if (!translate_tool_calls(*calls, p, &msg["tool_calls"], &call_ids, err)) return false;
    }
    if (auto name = m.find("tool_name"); name != m.end() && !name->is_null()) {
      if (!name->is_string()) return fail(err, "'" + p + ".tool_name' must be a string");
      msg["tool_name"] = *name;
      msg["name"] = *name;
    }
    if (m["role"] == "tool") {
      // The latest call of that function (or, without a name, the latest call) is answered.
      std::string id = "call_none";
      for (auto c = call_ids.rbegin(); c != call_ids.rend(); ++c)
        if (!msg.contains("name") || c->first == msg["name"]) {
          id = c->second;
          break;
        }
      msg["tool_call_id"] = id;
    }
    out.push_back(std::move(msg));
  }
  (*openai)["messages"] = std::move(out);
  return true;
}

// `context`: the token ids a previous /api/generate answer returned, to continue from.
bool read_context(const json& j, const Engine& engine, std::vector<int32_t>* out,
                  OllamaError* err) {
  auto it = j.find("context");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return fail(err, "'context' must be an array of token ids");
  const int64_t n_vocab = engine.model().hparams().n_vocab;
  for (const auto& t : *it) {
    if (!is_int_in(t, 0, n_vocab - 1))
      return fail(err, "'context' holds " + json_text(t) + ", which is not a token id (0.." +
                           std::to_string(n_vocab - 1) + ")");
    out->push_back(int32_t(t.get<int64_t>()));
  }
  return true;
}

bool parse_object(const ApiConfig& cfg, const std::string& body, json* j, OllamaError* err) {
  std::string why;
  if (parse_json_object(body, cfg.json_limits, j, &why)) return true;
  return fail(err, why);
}

}  // namespace

std::optional<OllamaGenerate> parse_ollama_generate(const ApiConfig& cfg, const Engine& engine,
                                                    const std::string& body, bool chat,
                                                    OllamaError* err) {
  json j;
  if (!parse_object(cfg, body, &j, err)) return std::nullopt;
  json openai = json::object();
  const bool fields_ok = chat ? check_fields(j, kChatFields, "", &openai, err)
                              : check_fields(j, kGenerateFields, "", &openai, err);
  if (!fields_ok || !check_unsupported(j, err)) return std::nullopt;
  OllamaGenerate req;
  req.chat = chat;
  OwnOptions own;
  if (!read_bool(j, "stream", &req.stream, err) || !read_bool(j, "think", &req.think, err) ||
      !read_options(j, cfg, &openai, &own, err) || !read_format(j, &openai, err))
    return std::nullopt;
  std::vector<int32_t> context;
  bool raw = false;
  if (chat) {
    if (!chat_messages(j, &openai, &req.load_only, err)) return std::nullopt;
    if (auto tools = j.find("tools"); tools != j.end() && !tools->is_null())
      openai["tools"] = *tools;
  } else {
    std::string prompt, system;
    if (!read_string(j, "prompt", &prompt, err) || !read_string(j, "system", &system, err) ||
        !read_bool(j, "raw", &raw, err) || !read_context(j, engine, &context, err))
      return std::nullopt;
    if (raw && !system.empty())
      return fail(err, "'system' cannot be used with 'raw' (a raw prompt gets no template)"),
             std::nullopt;
    req.load_only = prompt.empty() && context.empty();
    // Ollama formats a generate prompt with the model's template unless raw; without a
    // template the text is the prompt itself, as on /v1/completions.
    if (raw || cfg.chat_template.empty()) {
      raw = true;
      openai["prompt"] = prompt;
    } else {
      json messages = json::array();
      if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
      messages.push_back({{"role", "user"}, {"content", prompt}});
      openai["messages"] = std::move(messages);
    }
  }
  if (req.load_only) return req;
  // A continued context with an empty new prompt: the context alone is the prompt.
  const bool only_context = !chat && !context.empty() && openai.value("prompt", "x").empty();
  if (only_context) openai["prompt"] = json::array({context.front()});
  // Sized checks against the context are redone below once `context` is prepended.
  int64_t max_tokens = 0;  // 0: none given
  if (auto it = openai.find("max_tokens"); it != openai.end()) max_tokens = it->get<int64_t>();
  if (!context.empty()) openai.erase("max_tokens");
  ApiError api_err;
  auto parsed = parse_completion(cfg, engine, json_text(openai), chat || !raw, &api_err);
  if (!parsed) return from_api_error(api_err, err), std::nullopt;
  req.job = parsed->job;
  req.reasoning_starts_inside = parsed->reasoning_starts_inside;
  req.tools = parsed->tools;
  Job& job = *req.job;
  if (!context.empty()) {
    std::vector<int32_t> prompt = std::move(context);
    if (!only_context) {
      // The new part repeats no BOS: the context already begins the sequence.
      auto begin = job.prompt.begin();
      if (begin != job.prompt.end() && *begin == engine.tokenizer().bos_id()) ++begin;
      prompt.insert(prompt.end(), begin, job.prompt.end());
    }
    job.prompt = std::move(prompt);
    const int64_t n_prompt = int64_t(job.prompt.size());
    if (n_prompt >= cfg.ctx_size || (max_tokens > 0 && n_prompt + max_tokens > cfg.ctx_size))
      return fail(err,
                  "'context' and 'prompt' hold " + std::to_string(n_prompt) +
                      " tokens; with options.num_predict they exceed this server's context of " +
                      std::to_string(cfg.ctx_size) + " tokens"),
             std::nullopt;
    job.generate.max_tokens = int32_t(max_tokens > 0 ? max_tokens : cfg.ctx_size - n_prompt);
  }
  if (own.repeat_penalty) job.generate.sampling.repeat_penalty = *own.repeat_penalty;
  if (own.repeat_last_n) job.generate.sampling.repeat_last_n = *own.repeat_last_n;
  return req;
}

std::optional<OllamaEmbed> parse_ollama_embed(const ApiConfig& cfg, const Engine& engine,
                                              const std::string& body, bool legacy,
                                              OllamaError* err) {
  json j;
  if (!parse_object(cfg, body, &j, err)) return std::nullopt;
  json openai = json::object();
  if (!check_fields(j, kEmbedFields, "", &openai, err)) return std::nullopt;
  OllamaEmbed req;
  req.legacy = legacy;
  // Sampling options mean nothing to an embedding; only their shape is checked.
  json ignored_openai = json::object();
  OwnOptions own;
  if (!read_options(j, cfg, &ignored_openai, &own, err)) return std::nullopt;
  const char* input_key = legacy ? "prompt" : "input";
  if (j.contains(legacy ? "input" : "prompt"))
    return fail(err, std::string("'") + (legacy ? "input" : "prompt") + "' is not a field of " +
                         (legacy ? "/api/embeddings (use 'prompt')" : "/api/embed (use 'input')")),
           std::nullopt;
  bool truncate = true;
  if (!read_bool(j, "truncate", &truncate, err)) return std::nullopt;
  if (legacy && j.contains("truncate"))
    return fail(err, "'truncate' is not a field of /api/embeddings"), std::nullopt;
  if (auto it = j.find("dimensions"); it != j.end() && !it->is_null()) {
    const int64_t width = engine.model().hparams().n_embd;
    if (legacy || !is_int_in(*it, 1, width))
      return fail(err, "'dimensions' must be an integer from 1 to " + std::to_string(width)),
             std::nullopt;
    req.dimensions = it->get<int64_t>();
  }
  auto it = j.find(input_key);
  if (it == j.end() || it->is_null())
    return fail(err, std::string("'") + input_key + "' is required"), std::nullopt;
  json list = it->is_array() ? *it : json::array({*it});
  if (legacy && !it->is_string()) return fail(err, "'prompt' must be a string"), std::nullopt;
  // Texts are tokenized here so that `truncate` (Ollama's default) can cut them to the context.
  json ids = json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p =
        std::string(input_key) + (it->is_array() ? "[" + std::to_string(i) + "]" : "");
    if (!list[i].is_string()) return fail(err, "'" + p + "' must be a string"), std::nullopt;
    if (list[i].get_ref<const std::string&>().size() > cfg.limits.max_string_bytes)
      return fail(err, "'" + p + "' is longer than " + std::to_string(cfg.limits.max_string_bytes) +
                           " bytes"),
             std::nullopt;
    std::vector<int32_t> t = engine.tokenizer().encode(list[i].get<std::string>(), true);
    if (t.empty()) return fail(err, "'" + p + "' is empty"), std::nullopt;
    if (int64_t(t.size()) > cfg.ctx_size) {
      if (!truncate)
        return fail(err, "'" + p + "' has " + std::to_string(t.size()) +
                             " tokens, more than this server's context of " +
                             std::to_string(cfg.ctx_size) + " (truncate is false)"),
               std::nullopt;
      t.resize(size_t(cfg.ctx_size));
    }
    ids.push_back(std::move(t));
  }
  if (ids.empty()) return fail(err, "'input' must not be empty"), std::nullopt;
  openai["input"] = std::move(ids);
  bool base64 = false;
  ApiError api_err;
  req.job = parse_embeddings(cfg, engine, json_text(openai), &base64, &api_err);
  if (!req.job) return from_api_error(api_err, err), std::nullopt;
  return req;
}

bool parse_ollama_show(const ApiConfig& cfg, const std::string& body, OllamaError* err) {
  json j;
  if (!parse_object(cfg, body, &j, err)) return false;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "model" && it.key() != "name" && it.key() != "verbose")
      return fail(err, "'" + it.key() + "' is not supported by this server");
  const json model = j.contains("model") ? j["model"] : j.value("name", json(nullptr));
  if (!model.is_string() || model.get_ref<const std::string&>().empty())
    return fail(err, "'model' is required");
  return true;
}

std::string ollama_time(std::chrono::system_clock::time_point t) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs = std::time_t(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                (long long)(ns % 1000000000));
  return buf;
}

namespace {

int64_t ns_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  if (a == SteadyClock::time_point{} || b < a) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

json ollama_head(const ApiConfig& cfg) {
  return json{{"model", cfg.model_id},
              {"created_at", ollama_time(std::chrono::system_clock::now())}};
}

}  // namespace

json ollama_chunk(const ApiConfig& cfg, bool chat, const std::string& text,
                  const std::string& thinking, const std::vector<ToolCall>& calls) {
  json j = ollama_head(cfg);
  if (chat) {
    // A call-only turn has empty content, as Ollama sends it.
    const bool blank = !calls.empty() && text.find_first_not_of(" \n\r\t") == std::string::npos;
    j["message"] = {{"role", "assistant"}, {"content", blank ? "" : text}};
    if (!thinking.empty()) j["message"]["thinking"] = thinking;
    if (!calls.empty()) j["message"]["tool_calls"] = ollama_tool_calls(calls);
  } else {
    j["response"] = text;
    if (!thinking.empty()) j["thinking"] = thinking;
  }
  j["done"] = false;
  return j;
}

json ollama_final(const ApiConfig& cfg, const OllamaGenerate& req, const std::string& text,
                  SteadyClock::time_point received) {
  ReasoningPieces pieces{"", text};
  if (req.think) pieces = split_reasoning(text, req.reasoning_starts_inside);
  ToolCallParse parsed = answer_tool_calls(req.tools, pieces.content);
  json j = ollama_chunk(cfg, req.chat, parsed.content, pieces.reasoning, parsed.calls);
  j["done"] = true;
  const auto now = SteadyClock::now();
  if (req.load_only || !req.job) {
    j["done_reason"] = "load";
    return j;
  }
  const Job& job = *req.job;
  const Job::Timing& t = job.timing();
  j["done_reason"] = api_finish_reason(job);
  j["total_duration"] = ns_between(received, std::max(now, t.finished));
  j["load_duration"] = 0;  // the model was loaded at start
  j["prompt_eval_count"] = job.prompt_tokens() - job.cached_tokens();
  j["prompt_eval_duration"] = ns_between(t.started, t.first_token);
  j["eval_count"] = job.completion_tokens();
  j["eval_duration"] = ns_between(t.first_token, t.finished);
  if (!req.chat) {
    std::vector<int32_t> context = job.prompt;
    context.insert(context.end(), job.output_tokens().begin(), job.output_tokens().end());
    j["context"] = std::move(context);
  }
  return j;
}

json ollama_embed_response(const ApiConfig& cfg, const OllamaEmbed& req,
                           SteadyClock::time_point received) {
  json vectors = json::array();
  for (const auto& v : req.job->embeddings()) {
    if (req.dimensions <= 0 || size_t(req.dimensions) >= v.size()) {
      vectors.push_back(v);
      continue;
    }
    // Ollama's `dimensions`: the leading components, renormalized to unit length.
    std::vector<float> cut(v.begin(), v.begin() + req.dimensions);
    double norm = 0;
    for (float x : cut) norm += double(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0)
      for (float& x : cut) x = float(x / norm);
    vectors.push_back(std::move(cut));
  }
  if (req.legacy) return json{{"embedding", vectors.empty() ? json::array() : vectors[0]}};
  return json{{"model", cfg.model_id},
              {"embeddings", std::move(vectors)},
              {"total_duration", ns_between(received, SteadyClock::now())},
              {"load_duration", 0},
              {"prompt_eval_count", req.job->prompt_tokens()}};
}

}  // namespace hearth::server
