// tool-calls-api.h: field checks in OpenAI's error shape; the format knowledge (families,
// parsing, grammars) is runtime/tool-calls', this file only maps it to and from JSON.
#include "tool-calls-api.h"

#include <algorithm>
#include <ctime>
#include <random>

#include "openai-api.h"
#include "runtime/structured-output.h"
#include "runtime/tool-calls/tool-call-grammar.h"

namespace hearth::server {

namespace {

constexpr size_t kMaxTools = 128;

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

// tools -> the checked list (each {"type":"function","function":{name, description?,
// parameters?}}).
bool read_tools(const json& j, ToolUse* out, std::vector<ToolFunction>* functions, ApiError* err) {
  auto it = j.find("tools");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return invalid_request(err, "tools", "'tools' must be an array");
  if (it->size() > kMaxTools)
    return invalid_request(err, "tools",
                           "'tools' has " + std::to_string(it->size()) + " entries; the limit is " +
                               std::to_string(kMaxTools));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return invalid_request(err, p, "'" + p + "' must be an object");
    if (t.value("type", json()) != "function")
      return invalid_request(err, p + ".type", "'" + p + ".type' must be \"function\"");
    auto f = t.find("function");
    if (f == t.end() || !f->is_object())
      return invalid_request(err, p + ".function", "'" + p + ".function' must be an object");
    auto name = f->find("name");
    if (name == f->end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
      return invalid_request(err, p + ".function.name",
                             "'" + p + ".function.name' must match [A-Za-z0-9_-]{1,64}");
    const std::string n = name->get<std::string>();
    for (const auto& seen : out->names)
      if (seen == n)
        return invalid_request(err, p + ".function.name",
                               "'" + p + ".function.name' repeats the function \"" + n + "\"");
    if (auto d = f->find("description"); d != f->end() && !d->is_null() && !d->is_string())
      return invalid_request(err, p + ".function.description",
                             "'" + p + ".function.description' must be a string");
    std::string parameters;
    if (auto s = f->find("parameters"); s != f->end() && !s->is_null()) {
      if (!s->is_object())
        return invalid_request(err, p + ".function.parameters",
                               "'" + p + ".function.parameters' must be a JSON Schema object");
      parameters = json_text(*s);
    }
    out->names.push_back(n);
    functions->push_back({n, parameters});
  }
  if (!it->empty()) out->tools = *it;
  return true;
}

}  // namespace

bool parse_tool_request(const json& j, const ApiConfig& cfg, const Engine& engine, Job* job,
                        ToolUse* out, ApiError* err) {
  std::vector<ToolFunction> functions;
  if (!read_tools(j, out, &functions, err)) return false;
  bool parallel = true;
  if (auto it = j.find("parallel_tool_calls"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean())
      return invalid_request(err, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    parallel = it->get<bool>();
  }
  std::string choice = "auto";
  std::string named;
  if (auto it = j.find("tool_choice"); it != j.end() && !it->is_null()) {
    // "none" and "auto" without tools stay the no-ops they always were here (clients such as
    // LangChain send them on every request); asking for a call needs something to call.
    const bool noop = *it == "none" || *it == "auto";
    if (functions.empty() && !noop)
      return invalid_request(err, "tool_choice",
                             "'tool_choice' " + json_text(*it) + " needs 'tools' to choose from");
    if (it->is_string()) {
      choice = it->get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required")
        return invalid_request(err, "tool_choice",
                               "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                               "{\"type\":\"function\",\"function\":{\"name\":...}}");
    } else if (it->is_object() && it->value("type", json()) == "function" &&
               it->contains("function") && (*it)["function"].is_object() &&
               (*it)["function"].value("name", json()).is_string()) {
      named = (*it)["function"]["name"].get<std::string>();
      if (std::find(out->names.begin(), out->names.end(), named) == out->names.end())
        return invalid_request(
            err, "tool_choice",
            "'tool_choice' names the function \"" + named + "\", which is not in 'tools'");
      choice = "required";
    } else {
      return invalid_request(err, "tool_choice",
                             "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                             "{\"type\":\"function\",\"function\":{\"name\":...}}");
    }
  }
  if (functions.empty()) return true;
  out->family = detect_tool_call_family(cfg.chat_template);
  out->parse = choice != "none";
  if (choice != "required") return true;
  if (job->generate.constraint)
    return invalid_request(err, "tool_choice",
                           "'tool_choice' \"required\" or a named function cannot be combined "
                           "with 'response_format' or 'grammar'");
  if (!named.empty())
    std::erase_if(functions, [&](const ToolFunction& f) { return f.name != named; });
  auto gbnf = tool_call_gbnf(functions, {out->family, parallel});
  if (!gbnf) return invalid_request(err, "tools", gbnf.message(), "invalid_json_schema");
  auto grammar = compile_output_format({OutputFormat::Kind::kGbnf, gbnf.value()});
  if (!grammar)
    return invalid_request(err, "tools", "the tool call grammar failed: " + grammar.message(),
                           "invalid_json_schema");
  job->generate.constraint = make_constraint(engine, std::move(grammar.value()));
  out->required = true;
  return true;
}

std::vector<ToolTurnShape> tool_turn_shapes(const json& messages, ToolCallFamily family) {
  const bool mistral = family == ToolCallFamily::kMistral || family == ToolCallFamily::kMistralArgs;
  bool calls = false;
  for (const auto& m : messages)
    if (m.is_object() && m.contains("tool_calls") && !m["tool_calls"].is_null()) calls = true;
  if (!calls) return {{}};
  std::vector<ToolTurnShape> shapes;
  for (bool empty : {false, true})
    for (bool text : {false, true}) shapes.push_back({text, empty, mistral});
  return shapes;
}

void family_template_variables(const ToolUse& use,
                               std::vector<std::pair<std::string, json>>* vars) {
  if (use.family != ToolCallFamily::kFirefunction || use.tools.is_null()) return;
  json functions = json::array();
  for (const auto& t : use.tools) functions.push_back(t["function"]);
  vars->emplace_back("functions", functions.dump(4, ' ', false, json::error_handler_t::replace));
  char now[32];
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  std::strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S", &utc);
  vars->emplace_back("datetime", now);
}

namespace {

bool add_field(ChatMessage* msg, const std::string& key, const json& value, const std::string& p,
               ApiError* err) {
  auto v = json_to_value(json_text(value), p);
  if (!v) return invalid_request(err, p, "'" + p + "': " + v.message());
  msg->fields.emplace_back(key, std::move(v.value()));
  return true;
}

// A call id as 9 alphanumerics: kept when it is one, else a hash of it (FNV-1a), so a call and
// the tool result that names it still match.
std::string short_call_id(const std::string& id) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (id.size() == 9 && std::all_of(id.begin(), id.end(), alnum)) return id;
  uint64_t h = 1469598103934665603ull;
  for (char c : id) h = (h ^ uint8_t(c)) * 1099511628211ull;
  static const char* k = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string out;
  for (int i = 0; i < 9; ++i, h /= 62) out += k[h % 62];
  return out;
}

}  // namespace

bool message_tool_fields(const json& m, size_t index, const ToolTurnShape& shape, ChatMessage* msg,
                         ApiError* err) {
  const std::string p = "messages[" + std::to_string(index) + "]";
  for (const char* key : {"name", "tool_name", "tool_call_id"}) {
    auto it = m.find(key);
    if (it == m.end() || it->is_null()) continue;
    if (!it->is_string() || it->get_ref<const std::string&>().size() > 256)
      return invalid_request(err, p + "." + key,
                             "'" + p + "." + key + "' must be a string of at most 256 bytes");
    json value = *it;
    if (shape.short_call_ids && std::string(key) == "tool_call_id")
      value = short_call_id(it->get<std::string>());
    if (!add_field(msg, key, value, p + "." + key, err)) return false;
  }
  if (msg->role == "tool" && !m.contains("tool_call_id"))
    return invalid_request(err, p + ".tool_call_id",
                           "'" + p + ".tool_call_id' is required in a tool message");
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return true;
  if (msg->role != "assistant")
    return invalid_request(err, p + ".tool_calls",
                           "'" + p + ".tool_calls' is allowed on assistant messages only");
  if (!calls->is_array())
    return invalid_request(err, p + ".tool_calls", "'" + p + ".tool_calls' must be an array");
  json out = json::array();
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    const std::string cp = p + ".tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return invalid_request(err, cp + ".function", "'" + cp + ".function' must be an object");
    const json& f = c["function"];
    if (!f.value("name", json()).is_string())
      return invalid_request(err, cp + ".function.name",
                             "'" + cp + ".function.name' must be a string");
    json args = f.value("arguments", json::object());
    if (args.is_string()) {
      json parsed = json::parse(args.get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        return invalid_request(err, cp + ".function.arguments",
                               "'" + cp + ".function.arguments' must be a JSON object (as text)");
      args = std::move(parsed);
    } else if (!args.is_object()) {
      return invalid_request(err, cp + ".function.arguments",
                             "'" + cp + ".function.arguments' must be a JSON object or its text");
    }
    json call = {{"type", "function"},
                 {"function",
                  {{"name", f["name"]},
                   {"arguments", shape.string_arguments ? json(json_text(args)) : args}}}};
    if (auto id = c.find("id"); id != c.end() && id->is_string())
      call["id"] = shape.short_call_ids ? json(short_call_id(id->get<std::string>())) : *id;
    out.push_back(std::move(call));
  }
  if (!add_field(msg, "tool_calls", out, p + ".tool_calls", err)) return false;
  // Templates test `message.content is none` on a call-only turn, as Hugging Face passes it
  // (or, for those that cannot take None, the shape's "").
  if (m.value("content", json()).is_null() && !shape.null_content_as_empty)
    return add_field(msg, "content", nullptr, p, err);
  return true;
}

ToolCallParse answer_tool_calls(const ToolUse& use, const std::string& content) {
  if (!use.parse) return {content, {}};
  return parse_tool_calls(use.family, content, use.names);
}

namespace {

std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* k = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += k[rng() % 62];
  return id;
}

}  // namespace

json openai_tool_calls(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const auto& c : calls)
    out.push_back({{"id", new_call_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

std::vector<json> openai_tool_call_deltas(const std::vector<ToolCall>& calls) {
  std::vector<json> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back(json::array({{{"index", i},
                                {"id", new_call_id()},
                                {"type", "function"},
                                {"function", {{"name", calls[i].name}, {"arguments", ""}}}}}));
    out.push_back(json::array({{{"index", i}, {"function", {{"arguments", calls[i].arguments}}}}}));
  }
  return out;
}

json ollama_tool_calls(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const auto& c : calls)
    out.push_back({{"function", {{"name", c.name}, {"arguments", json::parse(c.arguments)}}}});
  return out;
}

}  // namespace hearth::server
