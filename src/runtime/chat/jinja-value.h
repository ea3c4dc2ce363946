// The values a Jinja template computes with: undefined, none, bool, int, float, string, list,
// dict (insertion-ordered, string keys) and callables. Add a kind here and in jinja-value.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace hearth::jinja {

class Value;
class Interpreter;

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* get(size_t pos, std::string_view name) const;  // keyword wins; null when absent
};

using NativeFunction = std::function<Result<Value>(Interpreter&, const CallArgs&)>;

// Dicts keep insertion order (Python 3.7+ semantics, which tojson and items() expose).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  // markupsafe's Markup (what `|safe` and `|escape` return): a string that `+` never escapes
  // but whose other operand it does, as jinja2 does without autoescaping.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value dict(Dict d = {});
  // A namespace() object: a dict whose attributes `set ns.x = ...` may assign.
  static Value namespace_object(Dict d = {});
  static Value callable(NativeFunction fn, std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_namespace() const { return kind_ == Kind::Dict && namespace_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const {
    return kind_ == Kind::Int ? double(i_) : kind_ == Kind::Bool ? b_ : f_;
  }
  const std::string& as_string() const { return s_; }  // string text, or undefined's name
  // Lists and dicts are shared (reference semantics, as in Python): copies alias one object.
  const std::vector<Value>& items() const { return *list_; }
  std::vector<Value>& items() { return *list_; }
  const Dict& entries() const { return *dict_; }
  Dict& entries() { return *dict_; }
  const Dict* dict_storage() const { return dict_.get(); }  // what namespaces share
  const NativeFunction& function() const { return *fn_; }

  bool truthy() const;
  // Python's str(): what {{ x }} prints. None -> "None", lists/dicts as Python repr.
  std::string to_output() const;
  // Python's repr(): strings quoted.
  std::string repr() const;
  const char* type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool namespace_ = false;
  bool markup_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<NativeFunction> fn_;
};

// Python's == across kinds (1 == 1.0, True == 1; lists and dicts compare element-wise).
bool values_equal(const Value& a, const Value& b);

// How deep v nests lists and dicts (a scalar 0, [1] 1, [[1]] 2), counted up to limit + 1, and
// whether `dict` (a namespace about to hold v) is among them. A namespace is the one value a
// template can change after making it, so it is where a value could come to hold itself (a
// cycle: shared storage never freed) or nest without bound (a chain that overflows the stack
// when freed); exec_set asks before each attribute store. *visited counts the values walked.
struct Nesting {
  uint32_t depth = 0;
  bool holds_dict = false;
};
Nesting nesting_of(const Value& v, const Dict* dict, uint32_t limit, uint64_t* visited);

// Python's bool is an int subclass: True + 1, x % 2 on a flag and range(flag) all take it.
inline bool is_intlike(const Value& v) {
  return v.is_int() || v.is_bool();
}
inline int64_t int_of(const Value& v) {  // requires is_intlike(v)
  return v.is_bool() ? int64_t(v.as_bool()) : v.as_int();
}

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

// Python's repr() of a float: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string format_python_float(double f);

// Length in code points (Python's len(str)); invalid UTF-8 bytes count one each.
size_t utf8_length(std::string_view s);
// Splits a UTF-8 string into code points (each a byte string), for slicing and indexing.
std::vector<std::string_view> utf8_chars(std::string_view s);

}  // namespace hearth::jinja
