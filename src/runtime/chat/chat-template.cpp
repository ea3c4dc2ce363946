// Chat-template rendering over a conversation and the JSON <-> template-value conversions the
// CLI and server use for message lists. New template variables go in render_chat_template.
#include "runtime/chat/chat-template.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace hearth {

namespace {

using json = nlohmann::ordered_json;

Result<jinja::Value> from_json(const json& j, int depth, const std::string& source) {
  if (depth > 128) return Status::error(source + ": JSON nested deeper than 128 levels");
  switch (j.type()) {
    case json::value_t::null:
      return jinja::Value::none();
    case json::value_t::boolean:
      return jinja::Value::boolean(j.get<bool>());
    case json::value_t::number_integer:
      return jinja::Value::integer(j.get<int64_t>());
    case json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return jinja::Value::number(double(u));
      return jinja::Value::integer(int64_t(u));
    }
    case json::value_t::number_float:
      return jinja::Value::number(j.get<double>());
    case json::value_t::string:
      return jinja::Value::string(j.get<std::string>());
    case json::value_t::array: {
      std::vector<jinja::Value> items;
      for (const auto& e : j) {
        HEARTH_ASSIGN_OR_RETURN(jinja::Value v, from_json(e, depth + 1, source));
        items.push_back(std::move(v));
      }
      return jinja::Value::list(std::move(items));
    }
    case json::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        HEARTH_ASSIGN_OR_RETURN(jinja::Value v, from_json(it.value(), depth + 1, source));
        d.set(it.key(), std::move(v));
      }
      return jinja::Value::dict(std::move(d));
    }
    default:
      return Status::error(source + ": unsupported JSON value");
  }
}

Result<json> to_json_value(const jinja::Value& v, int depth) {
  if (depth > 128) return Status::error("value nested deeper than 128 levels");
  switch (v.kind()) {
    case jinja::Value::Kind::None:
    case jinja::Value::Kind::Undefined:
      return json(nullptr);
    case jinja::Value::Kind::Bool:
      return json(v.as_bool());
    case jinja::Value::Kind::Int:
      return json(v.as_int());
    case jinja::Value::Kind::Float:
      return json(v.as_double());
    case jinja::Value::Kind::String:
      return json(v.as_string());
    case jinja::Value::Kind::List: {
      json arr = json::array();
      for (const auto& e : v.items()) {
        HEARTH_ASSIGN_OR_RETURN(json x, to_json_value(e, depth + 1));
        arr.push_back(std::move(x));
      }
      return arr;
    }
    case jinja::Value::Kind::Dict: {
      json obj = json::object();
      for (const auto& [k, e] : v.entries().entries) {
        HEARTH_ASSIGN_OR_RETURN(json x, to_json_value(e, depth + 1));
        obj[k] = std::move(x);
      }
      return obj;
    }
    case jinja::Value::Kind::Callable:
      return Status::error("a function cannot be saved as JSON");
  }
  return json(nullptr);
}

Result<json> parse_json(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error(source + ": not valid JSON");
  return j;
}

}  // namespace

Result<std::string> render_chat_template(const std::string& tmpl,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, const std::string& bos_token,
                                         const std::string& eos_token,
                                         const jinja::Variables& extra,
                                         const jinja::Limits& limits) {
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const auto& m : messages) {
    jinja::Dict d;
    d.set("role", jinja::Value::string(m.role));
    d.set("content", jinja::Value::string(m.content));
    for (const auto& [k, v] : m.fields) d.set(k, v);
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  jinja::Variables vars;
  vars.emplace_back("messages", jinja::Value::list(std::move(list)));
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.emplace_back("bos_token", jinja::Value::string(bos_token));
  vars.emplace_back("eos_token", jinja::Value::string(eos_token));
  // transformers passes tools= and documents= always, None when the caller has none, so
  // templates see them defined (`tools is none`, not `tools is undefined`).
  for (const char* name : {"tools", "documents"}) {
    const bool given =
        std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == name; });
    if (!given) vars.emplace_back(name, jinja::Value::none());
  }
  for (const auto& kv : extra) vars.push_back(kv);
  HEARTH_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(tmpl, limits));
  return t.render(vars);
}

Result<std::vector<ChatMessage>> parse_chat_messages_json(const std::string& text,
                                                          const std::string& source) {
  HEARTH_ASSIGN_OR_RETURN(json j, parse_json(text, source));
  if (!j.is_array()) return Status::error(source + ": expected a JSON array of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& m = j[i];
    const std::string where = source + ": message " + std::to_string(i);
    if (!m.is_object()) return Status::error(where + ": expected an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return Status::error(where + ": \"role\" must be a string");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role") continue;
      if (it.key() == "content" && it.value().is_string()) {
        msg.content = it.value().get<std::string>();
        continue;
      }
      HEARTH_ASSIGN_OR_RETURN(jinja::Value v, from_json(it.value(), 1, where));
      msg.fields.emplace_back(it.key(), std::move(v));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Result<std::string> chat_messages_to_json(const std::vector<ChatMessage>& messages) {
  json arr = json::array();
  for (const auto& m : messages) {
    json obj = json::object();
    obj["role"] = m.role;
    obj["content"] = m.content;
    for (const auto& [k, v] : m.fields) {
      HEARTH_ASSIGN_OR_RETURN(json x, to_json_value(v, 1));
      obj[k] = std::move(x);
    }
    arr.push_back(std::move(obj));
  }
  // Invalid UTF-8 (a model can emit partial characters) is replaced rather than thrown on.
  return arr.dump(2, ' ', false, json::error_handler_t::replace);
}

Result<jinja::Value> json_to_value(const std::string& text, const std::string& source) {
  HEARTH_ASSIGN_OR_RETURN(json j, parse_json(text, source));
  return from_json(j, 0, source);
}

}  // namespace hearth
