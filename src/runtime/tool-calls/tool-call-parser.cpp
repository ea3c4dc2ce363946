// tool-call-parser.h: one small reader per family over a cursor into the text. A JSON value's
// extent is found by scanning brackets outside strings, then nlohmann parses exactly that span,
// so junk after a call never makes a valid call fail and a truncated call never parses.
#include "runtime/tool-calls/tool-call-parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/stop-strings.h"

namespace hearth {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kFunctionaryRecipient = ">>>";
constexpr std::string_view kFunctools = "functools[";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// A read position over the output; every reader fails (nullopt) rather than guessing.
struct Cursor {
  std::string_view s;
  size_t pos = 0;

  bool done() const { return pos >= s.size(); }
  void skip_space() {
    while (pos < s.size() && is_space(s[pos])) ++pos;
  }
  bool eat(std::string_view lit) {
    if (s.substr(pos, lit.size()) != lit) return false;
    pos += lit.size();
    return true;
  }
  bool at(std::string_view lit) const { return s.substr(pos, lit.size()) == lit; }
  std::string_view rest() const { return pos < s.size() ? s.substr(pos) : std::string_view(); }

  // The JSON object or array starting here (after whitespace), consumed.
  std::optional<Json> json_value() {
    skip_space();
    if (done() || (s[pos] != '{' && s[pos] != '[')) return std::nullopt;
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
      const char c = s[i];
      if (in_string) {
        if (c == '\\')
          ++i;
        else if (c == '"')
          in_string = false;
        continue;
      }
      if (c == '"')
        in_string = true;
      else if (c == '{' || c == '[')
        ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) {
        Json j = Json::parse(s.substr(pos, i + 1 - pos), nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return std::nullopt;
        pos = i + 1;
        return j;
      }
    }
    return std::nullopt;  // truncated
  }
};

bool is_declared(const std::vector<std::string>& declared, std::string_view name) {
  return std::find(declared.begin(), declared.end(), name) != declared.end();
}

// Compact JSON; invalid UTF-8 in the model's strings becomes U+FFFD rather than an exception.
std::string compact(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Arguments as a compact JSON object: an object, or a string holding one (as OpenAI sends them
// back in history); absent or null is {}.
std::optional<std::string> arguments_text(const Json* args) {
  if (!args || args->is_null()) return "{}";
  if (args->is_object()) return compact(*args);
  if (args->is_string()) {
    Json j = Json::parse(args->get<std::string>(), nullptr, false);
    if (!j.is_discarded() && j.is_object()) return compact(j);
  }
  return std::nullopt;
}

// {"name": ..., "arguments"|"parameters": {...}} of a declared function.
std::optional<ToolCall> call_from_json(const Json& j, const std::vector<std::string>& declared) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || !is_declared(declared, name->get<std::string>()))
    return std::nullopt;
  const Json* args = nullptr;
  if (auto a = j.find("arguments"); a != j.end())
    args = &*a;
  else if (auto p = j.find("parameters"); p != j.end())
    args = &*p;
  auto text = arguments_text(args);
  if (!text) return std::nullopt;
  return ToolCall{name->get<std::string>(), *text};
}

std::optional<ToolCall> call_from_args(std::string_view name, const Json& args,
                                       const std::vector<std::string>& declared) {
  if (!is_declared(declared, name)) return std::nullopt;
  auto text = arguments_text(&args);
  if (!text) return std::nullopt;
  return ToolCall{std::string(name), *text};
}

// Adds a parsed call to out; false (the text is not this format's calls) when there is none.
bool append(std::optional<ToolCall> call, std::vector<ToolCall>* out) {
  if (!call) return false;
  out->push_back(std::move(*call));
  return true;
}

// A JSON array of call objects.
bool calls_from_array(const Json& list, const std::vector<std::string>& declared,
                      std::vector<ToolCall>* out) {
  if (!list.is_array() || list.empty()) return false;
  for (const auto& item : list) {
    if (!append(call_from_json(item, declared), out)) return false;
  }
  return true;
}

using Reader = bool (*)(Cursor&, const std::vector<std::string>&, std::vector<ToolCall>*);

// open, one call (read_call), close, repeated; a missing close tag at the very end is tolerated
// (the stop string or max_tokens may have cut it).
template <class ReadCall>
bool read_tagged(Cursor& c, std::string_view open, std::string_view close,
                 std::vector<ToolCall>* out, ReadCall read_call) {
  while (c.eat(open)) {
    if (!read_call()) return false;
    c.skip_space();
    if (!c.eat(close) && !c.done()) return false;
    c.skip_space();
  }
  return !out->empty();
}

// <tool_call>{json}</tool_call>, repeated.
bool read_hermes(Cursor& c, const std::vector<std::string>& declared, std::vector<ToolCall>* out) {
  return read_tagged(c, kHermesOpen, kHermesClose, out, [&] {
    auto j = c.json_value();
    return j && append(call_from_json(*j, declared), out);
  });
}

// name.call(key="value", n=3): Llama 3.1's built-in tool form after <|python_tag|>.
bool read_llama_builtin(Cursor& c, const std::vector<std::string>& declared,
                        std::vector<ToolCall>* out) {
  const size_t dot = c.rest().find(".call(");
  if (dot == std::string_view::npos) return false;
  const std::string name(c.rest().substr(0, dot));
  c.pos += dot + 6;
  Json args = Json::object();
  for (;;) {
    c.skip_space();
    if (c.eat(")")) break;
    const size_t eq = c.rest().find('=');
    if (eq == std::string_view::npos) return false;
    std::string key(c.rest().substr(0, eq));
    while (!key.empty() && is_space(key.back())) key.pop_back();
    c.pos += eq + 1;
    c.skip_space();
    // The value runs to the next top-level ',' or ')': a JSON literal (string, number, true).
    size_t end = c.pos;
    bool in_string = false;
    for (; end < c.s.size(); ++end) {
      const char ch = c.s[end];
      if (in_string) {
        if (ch == '\\')
          ++end;
        else if (ch == '"')
          in_string = false;
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == ',' || ch == ')') {
        break;
      }
    }
    if (end >= c.s.size()) return false;
    std::string value(c.s.substr(c.pos, end - c.pos));
    while (!value.empty() && is_space(value.back())) value.pop_back();
    if (value == "True") value = "true";
    if (value == "False") value = "false";
    if (value == "None") value = "null";
    Json v = Json::parse(value, nullptr, false);
    if (v.is_discarded() || key.empty()) return false;
    args[key] = v;
    c.pos = end;
    c.eat(",");
  }
  if (!append(call_from_args(name, args, declared), out)) return false;
  c.skip_space();
  return true;
}

// {"name":..,"parameters":{..}} objects (separated by ';' or whitespace), or a built-in call.
bool read_llama_body(Cursor& c, const std::vector<std::string>& declared,
                     std::vector<ToolCall>* out) {
  c.skip_space();
  if (!c.at("{")) return read_llama_builtin(c, declared, out);
  while (!c.done()) {
    auto j = c.json_value();
    if (!j) return false;
    if (!append(call_from_json(*j, declared), out)) return false;
    c.skip_space();
    c.eat(";");
    c.skip_space();
  }
  return true;
}

bool read_llama3(Cursor& c, const std::vector<std::string>& declared, std::vector<ToolCall>* out) {
  if (c.eat(kPythonTag)) return read_llama_body(c, declared, out);
  return read_llama_body(c, declared, out);
}

// [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[ARGS]{...} (with an optional [CALL_ID]id),
// repeated.
bool read_mistral(Cursor& c, const std::vector<std::string>& declared, std::vector<ToolCall>* out) {
  while (c.eat(kMistralCalls)) {
    c.skip_space();
    if (c.at("[") && !c.at(kMistralArgs)) {
      auto list = c.json_value();
      if (!list || !calls_from_array(*list, declared, out)) return false;
    } else {
      const std::string_view rest = c.rest();
      const size_t args_at = rest.find(kMistralArgs);
      if (args_at == std::string_view::npos) return false;
      std::string_view name = rest.substr(0, args_at);
      if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos)
        name = name.substr(0, id);
      c.pos += args_at + kMistralArgs.size();
      auto args = c.json_value();
      if (!args) return false;
      if (!append(call_from_args(name, *args, declared), out)) return false;
    }
    c.skip_space();
  }
  return !out->empty();
}

// <｜tool▁calls▁begin｜>(<｜tool▁call▁begin｜>type<｜tool▁sep｜>name\n```json\n{..}\n```
// <｜tool▁call▁end｜>)+<｜tool▁calls▁end｜>; the fence is optional.
bool read_deepseek(Cursor& c, const std::vector<std::string>& declared,
                   std::vector<ToolCall>* out) {
  c.eat(kDeepSeekCallsBegin);
  for (;;) {
    c.skip_space();
    if (!c.eat(kDeepSeekCallBegin)) break;
    const size_t sep = c.rest().find(kDeepSeekSep);
    if (sep == std::string_view::npos) return false;
    c.pos += sep + kDeepSeekSep.size();
    const size_t nl = c.rest().find('\n');
    if (nl == std::string_view::npos) return false;
    const std::string_view name = c.rest().substr(0, nl);
    c.pos += nl + 1;
    c.skip_space();
    const bool fenced = c.eat("```json") || c.eat("```");
    auto args = c.json_value();
    if (!args) return false;
    c.skip_space();
    if (fenced && !c.eat("```")) return false;
    if (!append(call_from_args(name, *args, declared), out)) return false;
    c.skip_space();
    if (!c.eat(kDeepSeekCallEnd) && !c.done()) return false;
  }
  c.skip_space();
  c.eat(kDeepSeekCallsEnd);
  c.skip_space();
  return !out->empty();
}

// <function=name>{..}</function>, repeated.
bool read_functionary_v31(Cursor& c, const std::vector<std::string>& declared,
                          std::vector<ToolCall>* out) {
  return read_tagged(c, kFunctionOpen, kFunctionClose, out, [&] {
    const size_t close = c.rest().find('>');
    if (close == std::string_view::npos) return false;
    const std::string_view name = c.rest().substr(0, close);
    c.pos += close + 1;
    auto args = c.json_value();
    return args && append(call_from_args(name, *args, declared), out);
  });
}

// functools[{...}, ...]
bool read_firefunction(Cursor& c, const std::vector<std::string>& declared,
                       std::vector<ToolCall>* out) {
  if (!c.eat(kFunctools)) return false;
  --c.pos;  // back onto the '['
  auto list = c.json_value();
  if (!list || !calls_from_array(*list, declared, out)) return false;
  c.skip_space();
  return true;
}

// {"tool_calls": [...]} or a bare {"name": ..., "arguments": {...}}, maybe in a ```json fence.
bool read_generic(Cursor& c, const std::vector<std::string>& declared, std::vector<ToolCall>* out) {
  const bool fenced = c.eat("```json") || c.eat("```");
  auto j = c.json_value();
  if (!j || !j->is_object()) return false;
  if (auto list = j->find("tool_calls"); list != j->end()) {
    if (!calls_from_array(*list, declared, out)) return false;
  } else {
    if (!append(call_from_json(*j, declared), out)) return false;
  }
  c.skip_space();
  if (fenced) c.eat("```");
  return true;
}

// Where the calls may begin in the text (npos: no call), and the family's reader.
size_t first_marker(ToolCallFamily family, std::string_view text) {
  auto find_any = [&](std::initializer_list<std::string_view> markers) {
    size_t at = std::string_view::npos;
    for (auto m : markers) at = std::min(at, text.find(m));
    return at;
  };
  switch (family) {
    case ToolCallFamily::kHermes:
      return text.find(kHermesOpen);
    case ToolCallFamily::kMistral:
    case ToolCallFamily::kMistralArgs:
      return text.find(kMistralCalls);
    case ToolCallFamily::kDeepSeek:
      return find_any({kDeepSeekCallsBegin, kDeepSeekCallBegin});
    case ToolCallFamily::kFunctionaryV31:
      return text.find(kFunctionOpen);
    case ToolCallFamily::kFunctionaryV32:
      return 0;
    case ToolCallFamily::kFirefunction:
      return text.find(kFunctools);
    case ToolCallFamily::kLlama3: {
      if (size_t tag = text.find(kPythonTag); tag != std::string_view::npos) return tag;
      size_t i = 0;
      while (i < text.size() && is_space(text[i])) ++i;
      return i < text.size() && text[i] == '{' ? i : std::string_view::npos;
    }
    case ToolCallFamily::kGeneric: {
      const size_t fence = text.find("```json");
      const size_t brace = text.find('{');
      return std::min(fence, brace);
    }
  }
  return std::string_view::npos;
}

// functionary v3.2: the prompt ends with ">>>", so the output starts with a recipient line:
// "all\n" + text, or "name\n" + JSON arguments; further parts start with ">>>".
ToolCallParse parse_functionary_v32(std::string_view text,
                                    const std::vector<std::string>& declared) {
  const std::string full =
      text.starts_with(kFunctionaryRecipient) ? std::string(text) : ">>>" + std::string(text);
  Cursor c{full};
  ToolCallParse out;
  while (c.eat(kFunctionaryRecipient)) {
    const size_t nl = c.rest().find('\n');
    if (nl == std::string_view::npos) return {std::string(text), {}};
    const std::string_view recipient = c.rest().substr(0, nl);
    c.pos += nl + 1;
    if (recipient == "all") {
      // Text runs to the next recipient line of a declared function (or "all"), or the end.
      size_t end = c.rest().size();
      for (size_t at = c.rest().find(kFunctionaryRecipient); at != std::string_view::npos;
           at = c.rest().find(kFunctionaryRecipient, at + 1)) {
        const std::string_view after = c.rest().substr(at + kFunctionaryRecipient.size());
        const size_t line = after.find('\n');
        if (line != std::string_view::npos &&
            (after.substr(0, line) == "all" || is_declared(declared, after.substr(0, line)))) {
          end = at;
          break;
        }
      }
      out.content += std::string(c.rest().substr(0, end));
      c.pos += end;
      continue;
    }
    auto args = c.json_value();
    if (!args) return {std::string(text), {}};
    auto call = call_from_args(recipient, *args, declared);
    if (!call) return {std::string(text), {}};
    out.calls.push_back(std::move(*call));
    c.skip_space();
  }
  if (!c.done() || out.calls.empty()) return {std::string(text), {}};
  return out;
}

Reader reader_of(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kHermes:
      return read_hermes;
    case ToolCallFamily::kLlama3:
      return read_llama3;
    case ToolCallFamily::kMistral:
    case ToolCallFamily::kMistralArgs:
      return read_mistral;
    case ToolCallFamily::kDeepSeek:
      return read_deepseek;
    case ToolCallFamily::kFunctionaryV31:
      return read_functionary_v31;
    case ToolCallFamily::kFirefunction:
      return read_firefunction;
    case ToolCallFamily::kFunctionaryV32:
    case ToolCallFamily::kGeneric:
      return read_generic;
  }
  return read_generic;
}

}  // namespace

ToolCallParse parse_tool_calls(ToolCallFamily family, std::string_view text,
                               const std::vector<std::string>& declared) {
  if (family == ToolCallFamily::kFunctionaryV32) return parse_functionary_v32(text, declared);
  const size_t at = first_marker(family, text);
  if (at == std::string_view::npos) return {std::string(text), {}};
  Cursor c{text, at};
  ToolCallParse out;
  // Whatever follows the calls (end-of-turn text a stop string missed, a remark) must be
  // whitespace; anything else means the model did not write a call after all.
  if (!reader_of(family)(c, declared, &out.calls) || !c.done() || out.calls.empty())
    return {std::string(text), {}};
  out.content = std::string(text.substr(0, at));
  return out;
}

ToolCallStreamGate::ToolCallStreamGate(ToolCallFamily family) : family_(family) {
  switch (family) {
    case ToolCallFamily::kHermes:
      markers_ = {kHermesOpen};
      break;
    case ToolCallFamily::kMistral:
    case ToolCallFamily::kMistralArgs:
      markers_ = {kMistralCalls};
      break;
    case ToolCallFamily::kDeepSeek:
      markers_ = {kDeepSeekCallsBegin, kDeepSeekCallBegin};
      break;
    case ToolCallFamily::kFunctionaryV31:
      markers_ = {kFunctionOpen};
      break;
    case ToolCallFamily::kFirefunction:
      markers_ = {kFunctools};
      break;
    case ToolCallFamily::kLlama3:
      markers_ = {kPythonTag};
      start_only_json_ = true;
      break;
    case ToolCallFamily::kGeneric:
      markers_ = {"```json", "{"};
      break;
    case ToolCallFamily::kFunctionaryV32:
      hold_all_ = true;
      break;
  }
}

std::string ToolCallStreamGate::push(std::string_view text) {
  held_ += text;
  if (in_call_ || hold_all_) return "";
  if (at_start_ && start_only_json_) {
    size_t i = 0;
    while (i < held_.size() && is_space(held_[i])) ++i;
    if (i == held_.size()) return "";  // only whitespace so far: it may precede a call
    at_start_ = false;
    if (held_[i] == '{') {
      in_call_ = true;
      return "";
    }
  }
  size_t cut = std::string::npos;
  for (auto m : markers_) cut = std::min(cut, held_.find(m));
  if (cut != std::string::npos) {
    in_call_ = true;
    std::string out = held_.substr(0, cut);
    held_.erase(0, cut);
    return out;
  }
  size_t keep = 0;
  for (auto m : markers_) keep = std::max(keep, partial_match_suffix(held_, m));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string ToolCallStreamGate::finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace hearth
