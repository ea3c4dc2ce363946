// tool-call-grammar.h: each function's schema is converted on its own (its $refs stay relative to
// its own root), its rules renamed f<i>-..., and a few wrapper rules per family write the fixed
// syntax around them. The JSON key order is always name first, then the arguments.
#include "runtime/tool-calls/tool-call-grammar.h"

#include "grammar/json-schema.h"

namespace hearth {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// A GBNF string literal of raw bytes.
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

// One call written as a JSON object, name first: {"name": "f", "<args_key>": <arguments>}.
std::string json_call(const std::string& name, const std::string& args_rule, const char* args_key) {
  return lit(std::string("{\"name\": \"") + name + "\", \"" + args_key + "\": ") + " " + args_rule +
         " " + lit("}");
}

std::string any_of(const std::vector<std::string>& alternatives) {
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

// `item`, and with parallel calls any more of them after `separator`.
std::string repeated(const std::string& item, const std::string& separator, bool parallel) {
  return parallel ? item + " (" + lit(separator) + " " + item + ")*" : item;
}

}  // namespace

std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix) {
  std::string out;
  out.reserve(gbnf.size() * 2);
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[' || c == '{') {
      // A string, a class or a repetition count: copied through its closing character.
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != close) j += gbnf[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, gbnf.size());
      out.append(gbnf, i, j - i);
      i = j;
    } else if (c == '#') {
      const size_t j = std::min(gbnf.find('\n', i), gbnf.size());
      out.append(gbnf, i, j - i);
      i = j;
    } else if (is_name_char(c)) {
      size_t j = i;
      while (j < gbnf.size() && is_name_char(gbnf[j])) ++j;
      out += prefix;
      out.append(gbnf, i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

Result<std::string> tool_call_gbnf(const std::vector<ToolFunction>& functions,
                                   const ToolCallGrammarOptions& options) {
  if (functions.empty()) return Status::error("tool_call_gbnf: no functions to call");
  std::string rules;
  std::vector<std::string> args;  // the arguments rule of each function
  for (size_t i = 0; i < functions.size(); ++i) {
    const std::string schema = functions[i].parameters.empty() ? std::string(R"({"type":"object"})")
                                                               : functions[i].parameters;
    auto gbnf = json_schema_to_gbnf(schema);
    if (!gbnf) {
      std::string why = "tools[";  // appended piecewise: GCC 12 warns on the chained '+' here
      why += std::to_string(i);
      why += "]: ";
      why += gbnf.message();
      return Status::error(why);
    }
    std::string prefix = std::to_string(i);
    prefix.insert(prefix.begin(), 'f');
    prefix.push_back('-');
    rules += prefix_gbnf_rules(gbnf.value(), prefix);
    if (!rules.empty() && rules.back() != '\n') rules += '\n';
    args.push_back(prefix + "root");
  }
  auto objects = [&](const char* args_key) {
    std::vector<std::string> alts;
    for (size_t i = 0; i < functions.size(); ++i)
      alts.push_back(json_call(functions[i].name, args[i], args_key));
    return any_of(alts);
  };
  // name + between + arguments, one alternative per function.
  auto named = [&](const std::string& between) {
    std::vector<std::string> alts;
    for (size_t i = 0; i < functions.size(); ++i)
      alts.push_back(lit(functions[i].name + between) + " " + args[i]);
    return any_of(alts);
  };
  const bool parallel = options.parallel;
  std::string root;
  switch (options.family) {
    case ToolCallFamily::kHermes:
      rules += "tool-call ::= " + lit("<tool_call>\n") + " " + objects("arguments") + " " +
               lit("\n</tool_call>") + "\n";
      root = repeated("tool-call", "\n", parallel);
      break;
    case ToolCallFamily::kLlama3:
      root = objects("parameters");
      break;
    case ToolCallFamily::kMistral:
      rules += "tool-call ::= " + objects("arguments") + "\n";
      root = lit("[TOOL_CALLS][") + " " + repeated("tool-call", ", ", parallel) + " " + lit("]");
      break;
    case ToolCallFamily::kMistralArgs:
      rules += "tool-call ::= " + lit("[TOOL_CALLS]") + " " + named("[ARGS]") + "\n";
      root = repeated("tool-call", "", parallel);
      break;
    case ToolCallFamily::kDeepSeek:
      rules += "tool-call ::= " + lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>") + " " +
               named("\n```json\n") + " " + lit("\n```<｜tool▁call▁end｜>") + "\n";
      root = lit("<｜tool▁calls▁begin｜>") + " " + repeated("tool-call", "\n", parallel) + " " +
             lit("<｜tool▁calls▁end｜>");
      break;
    case ToolCallFamily::kFunctionaryV31:
      rules +=
          "tool-call ::= " + lit("<function=") + " " + named(">") + " " + lit("</function>") + "\n";
      root = repeated("tool-call", "", parallel);
      break;
    case ToolCallFamily::kFunctionaryV32:
      // The prompt ends with ">>>": the first recipient line follows it directly.
      rules += "tool-call ::= " + named("\n") + "\n";
      root = repeated("tool-call", ">>>", parallel);
      break;
    case ToolCallFamily::kFirefunction:
      rules += "tool-call ::= " + objects("arguments") + "\n";
      root = lit(" functools[") + " " + repeated("tool-call", ", ", parallel) + " " + lit("]");
      break;
    case ToolCallFamily::kGeneric:
      rules += "tool-call ::= " + objects("arguments") + "\n";
      root =
          lit("{\"tool_calls\": [") + " " + repeated("tool-call", ", ", parallel) + " " + lit("]}");
      break;
  }
  return "root ::= " + root + "\n" + rules;
}

}  // namespace hearth
