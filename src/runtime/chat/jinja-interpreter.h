// Internal to the Jinja interpreter: the evaluator state that builtins (filters, tests, methods,
// globals) call back into. A new builtin goes in jinja-builtins.cpp, not here.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/chat/jinja-ast.h"
#include "runtime/chat/jinja.h"

namespace hearth::jinja {

class Interpreter {
 public:
  Interpreter(const Limits& limits, const Variables& vars);

  Result<std::string> run(const NodeList& nodes);

  // Charges `n` steps against the budget; fails once it is spent.
  Status step(uint64_t n = 1);
  // Fails when a value being built would exceed the output limit (strings, lists).
  Status check_size(uint64_t size, const char* what) const;
  const Limits& limits() const { return limits_; }

  Result<Value> call(const Value& fn, const CallArgs& args);
  Result<Value> get_attr(const Value& obj, const std::string& name);
  Result<Value> get_item(const Value& obj, const Value& key);
  // Python iteration: list items, dict keys, string characters; undefined iterates as empty.
  Result<std::vector<Value>> iterate(const Value& v);

  Result<Value> call_macro(const Node& macro, const CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };
  using Frame = std::unordered_map<std::string, Value>;

  Result<Flow> exec(const NodeList& nodes);
  Result<Flow> exec_node(const Node& node);
  Result<Flow> exec_node_inner(const Node& node);
  // Bounds native recursion (expressions inside recursive macros) so the stack cannot overflow.
  Status enter();
  static constexpr int kMaxEvalDepth = 256;
  // Lists and dicts a value stored in a namespace may nest (nesting_of, jinja-value.h).
  static constexpr uint32_t kMaxNamespaceNesting = 64;
  Result<Flow> exec_for(const Node& node);
  Status exec_set(const Node& node);
  Result<Value> eval(const Expr& e);
  Result<Value> eval_inner(const Expr& e);
  Result<CallArgs> eval_args(const Expr& e, size_t first);
  Result<Value> binary(const std::string& op, const Value& a, const Value& b);
  Result<bool> compare(const std::string& op, const Value& a, const Value& b);
  Result<Value> slice(const Value& target, const Value& start, const Value& stop,
                      const Value& step);
  Status emit(const std::string& text);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

  Limits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int depth_ = 0;
  std::string out_;
  std::vector<Frame> frames_;  // [0] globals, [1] template top level, then loops and macros
  size_t barrier_ = 0;         // frames below this (except 0 and 1) are hidden: macro scope
};

// Builtins (jinja-builtins.cpp).
Result<Value> apply_filter(Interpreter& in, const std::string& name, const Value& subject,
                           const CallArgs& args);
Result<bool> apply_test(Interpreter& in, const std::string& name, const Value& subject,
                        const CallArgs& args);
// A bound method of a string, dict or list (`s.strip`, `d.items`); undefined when none exists.
Value find_method(const Value& obj, const std::string& name);
void install_globals(std::unordered_map<std::string, Value>& frame, const Limits& limits);
// Python's `x in container`.
Result<bool> contains(const Value& container, const Value& item);
// d.items() / d.keys() / d.values() / d.get(key, default).
Result<Value> dict_method(const Value& d, const std::string& name, const CallArgs& args);

// Text helpers (jinja-methods.cpp). Case mapping is ASCII-only: chat templates apply it to
// role names and keywords, and Python's full Unicode mapping would need ICU here.
bool py_space(unsigned char c);  // Python's str.isspace() for single bytes
std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string capitalize(const std::string& s);  // Python's str.capitalize
std::string title(const std::string& s);       // Python's str.title
Result<std::string> replace_all(Interpreter& in, const std::string& s, const std::string& from,
                                const std::string& to, int64_t count);

// JSON text as Hugging Face's tojson writes it (no ASCII escaping); indent < 0 = one line.
Result<std::string> to_json(const Value& v, int indent, bool sort_keys);

}  // namespace hearth::jinja
