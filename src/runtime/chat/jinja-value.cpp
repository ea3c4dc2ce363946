// Jinja values: construction, truthiness, Python-compatible printing (str/repr) and equality.
// Printing follows CPython so templates that print lists or floats match Hugging Face exactly.
#include "runtime/chat/jinja-value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hearth::jinja {

const Value* CallArgs::get(size_t pos, std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  if (pos < positional.size()) return &positional[pos];
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* slot = find(key)) {
    *slot = std::move(v);
    return;
  }
  entries.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::namespace_object(Dict d) {
  Value v = dict(std::move(d));
  v.namespace_ = true;
  return v;
}
Value Value::callable(NativeFunction fn, std::string name) {
  Value v;
  v.kind_ = Kind::Callable;
  v.fn_ = std::make_shared<NativeFunction>(std::move(fn));
  v.s_ = std::move(name);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b_;
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !s_.empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return !dict_->entries.empty();
    case Kind::Callable:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "undefined";
    case Kind::None:
      return "none";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "string";
    case Kind::List:
      return "list";
    case Kind::Dict:
      return namespace_ ? "namespace" : "dict";
    case Kind::Callable:
      return "callable";
  }
  return "?";
}

std::string format_python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, then laid out the way CPython's repr does:
  // positional when -4 <= exponent < 16, scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = false;
  if (!sci.empty() && sci[0] == '-') {
    neg = true;
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = size_t(exp) + 1;
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += ebuf;
  }
  return neg ? "-" + out : out;
}

static std::string repr_string(const std::string& s) {
  // CPython prefers single quotes unless the text contains one and no double quote.
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == q)
      out += std::string("\\") + char(q);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String:
      return repr_string(s_);
    case Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + v.repr();
      }
      return out + (namespace_ ? "}>" : "}");
    }
    default:
      return to_output();
  }
}

std::string Value::to_output() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return b_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return format_python_float(f_);
    case Kind::String:
      return s_;
    case Kind::List:
    case Kind::Dict:
      return repr();
    case Kind::Callable:
      return "<function " + s_ + ">";
  }
  return "";
}

Nesting nesting_of(const Value& v, const Dict* dict, uint32_t limit, uint64_t* visited) {
  // Iterative, as the values it guards against are the ones too deep to recurse through.
  Nesting n;
  std::vector<std::pair<const Value*, uint32_t>> todo = {{&v, 0}};
  while (!todo.empty() && n.depth <= limit && !n.holds_dict) {
    const auto [x, d] = todo.back();
    todo.pop_back();
    ++*visited;
    if (x->is_list()) {
      n.depth = std::max(n.depth, d + 1);
      for (const Value& item : x->items()) todo.emplace_back(&item, d + 1);
    } else if (x->is_dict()) {
      n.depth = std::max(n.depth, d + 1);
      n.holds_dict = n.holds_dict || x->dict_storage() == dict;
      for (const auto& [key, item] : x->entries().entries) todo.emplace_back(&item, d + 1);
    }
  }
  return n;
}

bool values_equal(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.entries().entries;
      const auto& y = b.entries();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Callable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

size_t utf8_length(std::string_view s) {
  return utf8_chars(s).size();
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    if (c >= 0xF0 && c < 0xF8)
      len = 4;
    else if (c >= 0xE0)
      len = c < 0xF0 ? 3 : 1;
    else if (c >= 0xC0)
      len = 2;
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace hearth::jinja
