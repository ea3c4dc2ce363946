// Jinja string and dict methods (s.strip(), d.items(), ...), text helpers shared with the
// filters, and tojson. A new method = a kStringMethods entry plus a branch in string_method.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "runtime/chat/jinja-interpreter.h"

namespace hearth::jinja {

namespace {

Status need_string(const Value& v, const char* what) {
  if (v.is_string()) return Status::ok();
  return Status::error(std::string(what) + " expects a string, got " + v.type_name());
}

int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t def) {
  const Value* v = a.get(pos, name);
  return v && is_intlike(*v) ? int_of(*v) : def;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

Status json_write(std::string& out, const Value& v, int indent, bool sort_keys, int level) {
  if (level > 256) return Status::error("tojson: value nested too deeply");
  if (out.size() > (64u << 20)) return Status::error("tojson: output too large");
  const std::string item_sep = indent < 0 ? ", " : ",";
  auto newline = [&](int lv) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent) * size_t(lv), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return Status::ok();
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return Status::ok();
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return Status::ok();
    case Value::Kind::Float: {
      const double f = v.as_double();
      if (std::isnan(f))
        out += "NaN";
      else if (std::isinf(f))
        out += f < 0 ? "-Infinity" : "Infinity";
      else
        out += format_python_float(f);
      return Status::ok();
    }
    case Value::Kind::String:
      json_string(out, v.as_string());
      return Status::ok();
    case Value::Kind::List: {
      if (v.items().empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        HEARTH_TRY(json_write(out, v.items()[i], indent, sort_keys, level + 1));
      }
      newline(level);
      out += ']';
      return Status::ok();
    }
    case Value::Kind::Dict: {
      if (v.entries().entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.entries().entries) entries.push_back(&e);
      if (sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(out, entries[i]->first);
        out += ": ";
        HEARTH_TRY(json_write(out, entries[i]->second, indent, sort_keys, level + 1));
      }
      newline(level);
      out += '}';
      return Status::ok();
    }
    case Value::Kind::Undefined:
      return Status::error("tojson: '" + v.as_string() + "' is undefined");
    case Value::Kind::Callable:
      return Status::error("tojson: a function is not JSON serializable");
  }
  return Status::ok();
}

Result<Value> str_format(Interpreter& in, const std::string& fmt, const CallArgs& args) {
  // str.format with {} / {0} / {name} fields and {{ }} escapes; no format specs.
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = fmt.find('}', i);
      if (close == std::string::npos) return Status::error("format: unmatched '{'");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      const Value* v = nullptr;
      if (field.empty())
        v = auto_index < args.positional.size() ? &args.positional[auto_index++] : nullptr;
      else if (std::all_of(field.begin(), field.end(), ::isdigit) && field.size() < 9) {
        const size_t k = std::stoul(field);
        v = k < args.positional.size() ? &args.positional[k] : nullptr;
      } else {
        for (const auto& [name, val] : args.keyword)
          if (name == field) v = &val;
      }
      if (!v) return Status::error("format: no argument for field '{" + field + "}'");
      out += v->to_output();
      i = close;
    } else {
      out += c;
    }
    HEARTH_TRY(in.check_size(out.size(), "string"));
  }
  return Value::string(std::move(out));
}

Result<Value> split(Interpreter& in, const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<Value> parts;
  if (!sep || sep->is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) {
        std::string rest = s.substr(i);
        parts.push_back(Value::string(strip_chars(rest, nullptr, false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !py_space(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
  } else {
    HEARTH_TRY(need_string(*sep, "split separator"));
    const std::string& d = sep->as_string();
    if (d.empty()) return Status::error("split: empty separator");
    size_t pos = 0;
    while (true) {
      const size_t hit =
          (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) ? std::string::npos : s.find(d, pos);
      if (hit == std::string::npos) {
        parts.push_back(Value::string(s.substr(pos)));
        break;
      }
      parts.push_back(Value::string(s.substr(pos, hit - pos)));
      pos = hit + d.size();
    }
  }
  HEARTH_TRY(in.step(1 + parts.size()));
  return Value::list(std::move(parts));
}

Result<Value> string_method(Interpreter& in, const std::string& s, const std::string& name,
                            const CallArgs& a) {
  if (name == "strip") return Value::string(strip_chars(s, a.get(0, "chars"), true, true));
  if (name == "lstrip") return Value::string(strip_chars(s, a.get(0, "chars"), true, false));
  if (name == "rstrip") return Value::string(strip_chars(s, a.get(0, "chars"), false, true));
  if (name == "upper") return Value::string(ascii_upper(s));
  if (name == "lower") return Value::string(ascii_lower(s));
  if (name == "title") return Value::string(title(s));
  if (name == "capitalize") return Value::string(capitalize(s));
  if (name == "split") return split(in, s, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1));
  if (name == "splitlines") {
    std::vector<Value> lines;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t nl = s.find_first_of("\r\n", pos);
      if (nl == std::string::npos) nl = s.size();
      lines.push_back(Value::string(s.substr(pos, nl - pos)));
      pos = nl + ((nl + 1 < s.size() && s[nl] == '\r' && s[nl + 1] == '\n') ? 2 : 1);
    }
    return Value::list(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) return Status::error(name + "() needs an argument");
    std::vector<Value> options = p->is_list() ? p->items() : std::vector<Value>{*p};
    for (const auto& o : options) {
      HEARTH_TRY(need_string(o, name.c_str()));
      const std::string& t = o.as_string();
      if (t.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, t.size(), t) == 0
                               : s.compare(s.size() - t.size(), t.size(), t) == 0)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (!from || !to || !from->is_string() || !to->is_string())
      return Status::error("replace() needs two strings");
    HEARTH_ASSIGN_OR_RETURN(std::string r, replace_all(in, s, from->as_string(), to->as_string(),
                                                       int_arg(a, 2, "count", -1)));
    return Value::string(std::move(r));
  }
  if (name == "find" || name == "count") {
    const Value* t = a.get(0, "sub");
    if (!t || !t->is_string()) return Status::error(name + "() needs a string");
    if (name == "find") {
      const size_t hit = s.find(t->as_string());
      return Value::integer(hit == std::string::npos ? -1 : int64_t(utf8_length(s.substr(0, hit))));
    }
    if (t->as_string().empty()) return Value::integer(int64_t(utf8_length(s)) + 1);
    int64_t n = 0;
    for (size_t pos = 0; (pos = s.find(t->as_string(), pos)) != std::string::npos;
         pos += t->as_string().size())
      ++n;
    return Value::integer(n);
  }
  if (name == "format") return str_format(in, s, a);
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items) return Status::error("join() needs an iterable");
    return apply_filter(in, "join", *items, CallArgs{{Value::string(s)}, {}});
  }
  auto all_of = [&](int (*pred)(int)) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
      return pred(static_cast<unsigned char>(c)) != 0;
    });
  };
  if (name == "isdigit") return Value::boolean(all_of(::isdigit));
  if (name == "isalpha") return Value::boolean(all_of(::isalpha));
  if (name == "isalnum") return Value::boolean(all_of(::isalnum));
  if (name == "isspace") return Value::boolean(all_of(::isspace));
  if (name == "islower") return Value::boolean(s != ascii_upper(s) && s == ascii_lower(s));
  if (name == "isupper") return Value::boolean(s != ascii_lower(s) && s == ascii_upper(s));
  return Status::error("string has no method '" + name + "'");
}

const char* const kStringMethods[] = {
    "strip",      "lstrip",     "rstrip",   "upper",   "lower",   "title",  "capitalize", "split",
    "splitlines", "startswith", "endswith", "replace", "find",    "count",  "format",     "join",
    "isdigit",    "isalpha",    "isalnum",  "isspace", "islower", "isupper"};

}  // namespace

// Python's str.isspace for ASCII plus the C0 separators str.strip() also removes.
bool py_space(unsigned char c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
}

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  auto drop = [&](char c) {
    if (chars && chars->is_string()) return chars->as_string().find(c) != std::string::npos;
    return py_space(static_cast<unsigned char>(c));
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
// Python's str.title: a letter after a non-letter is upper-cased, other letters lower-cased.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool letter = std::isalpha(u);
    if (letter) c = char(prev_letter ? std::tolower(u) : std::toupper(u));
    prev_letter = letter;
  }
  return out;
}

Result<std::string> replace_all(Interpreter& in, const std::string& s, const std::string& from,
                                const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    for (auto c : utf8_chars(s)) {
      if (count >= 0 && done >= count) {
        out += c;
        continue;
      }
      out += to;
      out += c;
      ++done;
    }
    if (count < 0 || done < count) out += to;
  } else {
    while (true) {
      const size_t hit = (count >= 0 && done >= count) ? std::string::npos : s.find(from, pos);
      if (hit == std::string::npos) break;
      out.append(s, pos, hit - pos);
      out += to;
      pos = hit + from.size();
      ++done;
      HEARTH_TRY(in.check_size(out.size(), "string"));
    }
    out.append(s, pos, std::string::npos);
  }
  HEARTH_TRY(in.check_size(out.size(), "string"));
  HEARTH_TRY(in.step(1 + out.size() / 16));
  return out;
}

Result<Value> dict_method(const Value& d, const std::string& name, const CallArgs& a) {
  if (name == "items" || name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries().entries) {
      if (name == "items")
        out.push_back(Value::list({Value::string(k), v}));
      else if (name == "keys")
        out.push_back(Value::string(k));
      else
        out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  // get
  const Value* key = a.get(0, "key");
  if (!key) return Status::error("get() needs a key");
  if (key->is_string())
    if (const Value* v = d.entries().find(key->as_string())) return *v;
  const Value* def = a.get(1, "default");
  return def ? *def : Value::none();
}

Value find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    for (const char* m : kStringMethods)
      if (name == m) {
        const std::string s = obj.as_string();
        return Value::callable(
            [s, name](Interpreter& in, const CallArgs& a) { return string_method(in, s, name, a); },
            name);
      }
  } else if (obj.is_dict() &&
             (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::callable(
        [obj, name](Interpreter&, const CallArgs& a) { return dict_method(obj, name, a); }, name);
  }
  return Value::undefined(name);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string())
        return Status::error(std::string("'in <string>' needs a string on the left, got ") +
                             item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& v : container.items())
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      return item.is_string() && container.entries().find(item.as_string()) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      return Status::error(std::string("argument of type ") + container.type_name() +
                           " is not iterable");
  }
}

Result<std::string> to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  HEARTH_TRY(json_write(out, v, indent, sort_keys, 0));
  return out;
}

}  // namespace hearth::jinja
