// Jinja builtins used by chat templates: filters, tests, string/dict methods and the globals
// (range, namespace, dict, raise_exception, strftime_now). A new filter = one branch in
// apply_filter; every builtin charges steps for the work it does and checks sizes it builds.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "runtime/chat/jinja-interpreter.h"

namespace hearth::jinja {

namespace {

const std::string& str_arg(const CallArgs& a, size_t pos, const char* name,
                           const std::string& def) {
  const Value* v = a.get(pos, name);
  return v && v->is_string() ? v->as_string() : def;
}

int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t def) {
  const Value* v = a.get(pos, name);
  return v && is_intlike(*v) ? int_of(*v) : def;
}

bool bool_arg(const CallArgs& a, size_t pos, const char* name, bool def) {
  const Value* v = a.get(pos, name);
  return v ? v->truthy() : def;
}

// Attribute paths as Jinja's map/selectattr/sort take them: "a.b" or "items.0".
Result<Value> resolve_path(Interpreter& in, const Value& item, const std::string& path) {
  Value cur = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string part = path.substr(pos, dot - pos);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.is_undefined()) return cur;
    if (numeric && part.size() < 18) {
      HEARTH_ASSIGN_OR_RETURN(cur, in.get_item(cur, Value::integer(std::stoll(part))));
    } else {
      HEARTH_ASSIGN_OR_RETURN(cur, in.get_item(cur, Value::string(part)));
    }
    pos = dot + 1;
  }
  return cur;
}

// Ordering for sort/min/max/dictsort; strings optionally case-folded.
Result<int> order(const Value& a, const Value& b, bool case_sensitive) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    const int c = case_sensitive ? a.as_string().compare(b.as_string())
                                 : ascii_lower(a.as_string()).compare(ascii_lower(b.as_string()));
    return c < 0 ? -1 : c > 0;
  }
  return Status::error(std::string("cannot order ") + a.type_name() + " and " + b.type_name());
}

Result<std::vector<Value>> sorted(Interpreter& in, std::vector<Value> items, bool reverse,
                                  bool case_sensitive, const std::string& attribute) {
  HEARTH_TRY(in.step(1 + items.size() * 8));
  std::vector<Value> keys;
  for (const auto& it : items) {
    if (attribute.empty())
      keys.push_back(it);
    else {
      HEARTH_ASSIGN_OR_RETURN(Value k, resolve_path(in, it, attribute));
      keys.push_back(std::move(k));
    }
  }
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  Status err;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    auto c = order(keys[x], keys[y], case_sensitive);
    if (!c.is_ok()) {
      if (err.is_ok()) err = c.status();
      return false;
    }
    return reverse ? c.value() > 0 : c.value() < 0;
  });
  HEARTH_TRY(err);
  std::vector<Value> out;
  for (size_t i : idx) out.push_back(items[i]);
  return out;
}

}  // namespace

Result<bool> apply_test(Interpreter& in, const std::string& name, const Value& v,
                        const CallArgs& a) {
  const Value* arg = a.get(0, "value");
  auto need_arg = [&]() -> Status {
    if (!arg) return Status::error("test '" + name + "' needs an argument");
    return Status::ok();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_dict();
  // jinja2's Undefined has __iter__, __len__ and __getitem__, so it passes both.
  if (name == "sequence" || name == "iterable")
    return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && v.as_string() == ascii_lower(v.as_string());
  if (name == "upper") return v.is_string() && v.as_string() == ascii_upper(v.as_string());
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!is_intlike(v))
      return Status::error("test '" + name + "' needs an integer, got " + v.type_name());
    if (name == "odd") return int_of(v) % 2 != 0;
    if (name == "even") return int_of(v) % 2 == 0;
    HEARTH_TRY(need_arg());
    if (!is_intlike(*arg) || int_of(*arg) == 0)
      return Status::error("divisibleby needs a non-zero integer");
    return int_of(v) % int_of(*arg) == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
    HEARTH_TRY(need_arg());
    return values_equal(v, *arg);
  }
  if (name == "ne" || name == "!=") {
    HEARTH_TRY(need_arg());
    return !values_equal(v, *arg);
  }
  if (name == "in") {
    HEARTH_TRY(need_arg());
    return contains(*arg, v);
  }
  const char* ord_names[][2] = {{"lt", "<"},  {"le", "<="},      {"gt", ">"},
                                {"ge", ">="}, {"lessthan", "<"}, {"greaterthan", ">"}};
  for (auto& [word, op] : ord_names) {
    if (name != word && name != op) continue;
    HEARTH_TRY(need_arg());
    HEARTH_ASSIGN_OR_RETURN(int c, order(v, *arg, true));
    const std::string o = op;
    return o == "<" ? c < 0 : o == "<=" ? c <= 0 : o == ">" ? c > 0 : c >= 0;
  }
  (void)in;
  return Status::error("unknown test '" + name + "'");
}

Result<Value> apply_filter(Interpreter& in, const std::string& name, const Value& v,
                           const CallArgs& a) {
  HEARTH_TRY(in.step());
  auto string_of = [&]() -> Result<std::string> {
    if (v.is_undefined()) return std::string();
    return v.to_output();
  };
  if (name == "safe") {
    if (v.is_markup()) return v;
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    return Value::markup(std::move(s));
  }
  if (name == "trim" || name == "strip") {
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    return Value::string(strip_chars(s, a.get(0, "chars"), true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    if (name == "upper") return Value::string(ascii_upper(s));
    if (name == "lower") return Value::string(ascii_lower(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    return Value::string(title(s));
  }
  if (name == "string") return Value::string(v.to_output());
  if (name == "indent") {
    // Indents every line but the first (unless first=true); blank lines only with blank=true.
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    const Value* w = a.get(0, "width");
    const std::string pad =
        w && w->is_string()
            ? w->as_string()
            : std::string(size_t(std::clamp<int64_t>(int_arg(a, 0, "width", 4), 0, 256)), ' ');
    const bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
    std::string out;
    size_t pos = 0;
    bool is_first = true;
    while (true) {
      const size_t nl = s.find('\n', pos);
      const std::string line =
          s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      if ((!is_first || first) && (blank || !line.empty())) out += pad;
      out += line;
      HEARTH_TRY(in.check_size(out.size(), "string"));
      if (nl == std::string::npos) break;
      out += '\n';
      pos = nl + 1;
      is_first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (v.is_markup() && name != "forceescape") return v;  // already safe
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    std::string out = html_escape(s);
    HEARTH_TRY(in.check_size(out.size(), "string"));
    return Value::markup(std::move(out));
  }
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const int indent = ind && is_intlike(*ind) ? int(std::clamp<int64_t>(int_of(*ind), 0, 64)) : -1;
    HEARTH_ASSIGN_OR_RETURN(std::string s, to_json(v, indent, bool_arg(a, 99, "sort_keys", false)));
    HEARTH_TRY(in.check_size(s.size(), "tojson output"));
    HEARTH_TRY(in.step(1 + s.size() / 16));
    return Value::string(std::move(s));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::integer(int64_t(utf8_length(v.as_string())));
    if (v.is_list()) return Value::integer(int64_t(v.items().size()));
    if (v.is_dict()) return Value::integer(int64_t(v.entries().entries.size()));
    if (v.is_undefined()) return Value::integer(0);
    return Status::error(std::string("length: a ") + v.type_name() + " has no length");
  }
  if (name == "replace") {
    HEARTH_ASSIGN_OR_RETURN(std::string s, string_of());
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (!from || !to) return Status::error("replace needs two arguments");
    HEARTH_ASSIGN_OR_RETURN(std::string r, replace_all(in, s, from->to_output(), to->to_output(),
                                                       int_arg(a, 2, "count", -1)));
    return Value::string(std::move(r));
  }
  if (name == "default" || name == "d") {
    const bool boolean = bool_arg(a, 1, "boolean", false);
    const bool use_default = v.is_undefined() || (boolean && !v.truthy());
    if (!use_default) return v;
    const Value* def = a.get(0, "default_value");
    return def ? *def : Value::string("");
  }
  if (name == "attr") {
    return in.get_attr(v, str_arg(a, 0, "name", ""));
  }
  if (name == "items" || name == "dictsort") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict())
      return Status::error(name + ": expects a dict, got " + std::string(v.type_name()));
    HEARTH_ASSIGN_OR_RETURN(Value items, dict_method(v, "items", {}));
    if (name == "items") return items;
    std::vector<Value> pairs = items.items();
    const bool by_value = str_arg(a, 1, "by", "key") == "value";
    HEARTH_ASSIGN_OR_RETURN(pairs,
                            sorted(in, pairs, bool_arg(a, 2, "reverse", false),
                                   bool_arg(a, 0, "case_sensitive", false), by_value ? "1" : "0"));
    return Value::list(std::move(pairs));
  }
  if ((name == "int" || name == "float") && v.is_undefined()) {
    // int(Undefined) raises UndefinedError, which jinja2's filters do not catch.
    return Status::error(name + ": '" + v.as_string() + "' is undefined");
  }
  if (name == "int") {
    const int64_t def = int_arg(a, 0, "default", 0);
    if (is_intlike(v)) return Value::integer(int_of(v));
    if (v.is_float()) {
      const double f = v.as_double();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return Value::integer(def);
      return Value::integer(int64_t(f));
    }
    if (v.is_string()) {
      const std::string s = strip_chars(v.as_string(), nullptr, true, true);
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(s.c_str(), &end, int(int_arg(a, 1, "base", 10)));
      if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
      const double f = std::strtod(s.c_str(), &end);  // Jinja's int filter accepts "3.7"
      if (!s.empty() && end && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18)
        return Value::integer(int64_t(f));
    }
    return Value::integer(def);
  }
  if (name == "float") {
    const Value* d = a.get(0, "default");
    const Value def = d ? *d : Value::number(0.0);
    if (v.is_number() || v.is_bool()) return Value::number(v.as_double());
    if (v.is_string()) {
      const std::string s = strip_chars(v.as_string(), nullptr, true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0') return Value::number(f);
    }
    return def;
  }
  if (name == "abs") {
    if (v.is_float()) return Value::number(std::fabs(v.as_double()));
    if (is_intlike(v) && int_of(v) != INT64_MIN) return Value::integer(std::llabs(int_of(v)));
    return Status::error(std::string("abs: bad operand ") + v.type_name());
  }
  if (name == "round") {
    if (!v.is_number() && !v.is_bool()) return Status::error("round: expects a number");
    const int64_t prec = std::clamp<int64_t>(int_arg(a, 0, "precision", 0), 0, 15);
    const std::string method = str_arg(a, 1, "method", "common");
    // Python's round() sends ties to even; nearbyint does the same in the default mode.
    const double scale = std::pow(10.0, double(prec));
    const double x = v.as_double() * scale;
    const double r = method == "ceil"    ? std::ceil(x)
                     : method == "floor" ? std::floor(x)
                                         : std::nearbyint(x);
    return Value::number(r / scale);
  }
  // Everything below works on a sequence.
  static const char* const kSequenceFilters[] = {
      "list",   "first", "last", "reverse", "join",   "sort",       "min",       "max",
      "unique", "sum",   "map",  "select",  "reject", "selectattr", "rejectattr"};
  if (std::find_if(std::begin(kSequenceFilters), std::end(kSequenceFilters),
                   [&](const char* f) { return name == f; }) == std::end(kSequenceFilters))
    return Status::error("unknown filter '" + name + "'");
  // jinja2's map, select, reject, selectattr and rejectattr start with `if value:`, so a
  // none (or any falsy value) gives an empty sequence where `list` would raise.
  const bool guarded = name == "map" || name == "select" || name == "reject" ||
                       name == "selectattr" || name == "rejectattr";
  if (guarded && !v.truthy()) return Value::list({});
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v));
  HEARTH_TRY(in.step(1 + items.size()));
  if (name == "list") return Value::list(std::move(items));
  if (name == "first" || name == "last") {
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::string s;
      for (auto it = items.rbegin(); it != items.rend(); ++it) s += it->as_string();
      return Value::string(std::move(s));
    }
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "join") {
    const std::string sep = str_arg(a, 0, "d", "");
    const Value* attribute = a.get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      if (attribute) {
        HEARTH_ASSIGN_OR_RETURN(Value x, resolve_path(in, items[i], attribute->to_output()));
        out += x.to_output();
      } else {
        out += items[i].to_output();
      }
      HEARTH_TRY(in.check_size(out.size(), "joined string"));
    }
    HEARTH_TRY(in.step(out.size() / 16));
    return Value::string(std::move(out));
  }
  if (name == "sort") {
    const Value* attribute = a.get(2, "attribute");
    HEARTH_ASSIGN_OR_RETURN(items, sorted(in, std::move(items), bool_arg(a, 0, "reverse", false),
                                          bool_arg(a, 1, "case_sensitive", false),
                                          attribute ? attribute->to_output() : ""));
    return Value::list(std::move(items));
  }
  if (name == "min" || name == "max") {
    if (items.empty()) return Value::undefined(name);
    const Value* attribute = a.get(1, "attribute");
    HEARTH_ASSIGN_OR_RETURN(
        items, sorted(in, std::move(items), false, bool_arg(a, 0, "case_sensitive", false),
                      attribute ? attribute->to_output() : ""));
    return name == "min" ? items.front() : items.back();
  }
  if (name == "unique") {
    std::vector<Value> out;
    const bool cs = bool_arg(a, 0, "case_sensitive", false);
    for (const auto& it : items) {
      bool seen = false;
      for (const auto& o : out) {
        seen = (!cs && it.is_string() && o.is_string())
                   ? ascii_lower(it.as_string()) == ascii_lower(o.as_string())
                   : values_equal(it, o);
        if (seen) break;
      }
      HEARTH_TRY(in.step(1 + out.size()));
      if (!seen) out.push_back(it);
    }
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Value* attribute = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const auto& it : items) {
      Value x = it;
      if (attribute) {
        HEARTH_ASSIGN_OR_RETURN(x, resolve_path(in, it, attribute->to_output()));
      }
      if (!(x.is_number() || x.is_bool()) || !(total.is_number() || total.is_bool()))
        return Status::error("sum: items must be numbers");
      if (is_intlike(x) && is_intlike(total)) {
        int64_t r;
        if (__builtin_add_overflow(int_of(total), int_of(x), &r))
          return Status::error("sum: integer overflow");
        total = Value::integer(r);
      } else {
        total = Value::number(total.as_double() + x.as_double());
      }
    }
    return total;
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = nullptr;
    for (const auto& [k, val] : a.keyword)
      if (k == "attribute") attribute = &val;
    if (attribute) {
      const Value* def = nullptr;
      for (const auto& [k, val] : a.keyword)
        if (k == "default") def = &val;
      for (const auto& it : items) {
        HEARTH_ASSIGN_OR_RETURN(Value x, resolve_path(in, it, attribute->to_output()));
        out.push_back(x.is_undefined() && def ? *def : x);
      }
      return Value::list(std::move(out));
    }
    if (a.positional.empty() || !a.positional[0].is_string())
      return Status::error("map: needs a filter name or attribute=");
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const auto& it : items) {
      HEARTH_ASSIGN_OR_RETURN(Value x, apply_filter(in, a.positional[0].as_string(), it, rest));
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool want = name == "select" || name == "selectattr";
    size_t p = 0;
    std::string attribute;
    if (by_attr) {
      if (a.positional.empty() || !a.positional[0].is_string())
        return Status::error(name + ": needs an attribute name");
      attribute = a.positional[p++].as_string();
    }
    std::string test;
    if (p < a.positional.size()) {
      if (!a.positional[p].is_string()) return Status::error(name + ": test name must be a string");
      test = a.positional[p++].as_string();
    }
    CallArgs test_args;
    test_args.positional.assign(a.positional.begin() + long(std::min(p, a.positional.size())),
                                a.positional.end());
    std::vector<Value> out;
    for (const auto& it : items) {
      Value x = it;
      if (by_attr) {
        HEARTH_ASSIGN_OR_RETURN(x, resolve_path(in, it, attribute));
      }
      bool pass = x.truthy();
      if (!test.empty()) {
        HEARTH_ASSIGN_OR_RETURN(pass, apply_test(in, test, x, test_args));
      }
      if (pass == want) out.push_back(it);
    }
    return Value::list(std::move(out));
  }
  return Status::error("unknown filter '" + name + "'");
}

void install_globals(std::unordered_map<std::string, Value>& frame, const Limits& limits) {
  frame["range"] = Value::callable(
      [](Interpreter& in, const CallArgs& a) -> Result<Value> {
        int64_t start = 0, stop = 0, stride = 1;
        for (const auto& v : a.positional)
          if (!is_intlike(v)) return Status::error("range() arguments must be integers");
        if (a.positional.size() == 1)
          stop = int_of(a.positional[0]);
        else if (a.positional.size() == 2 || a.positional.size() == 3) {
          start = int_of(a.positional[0]);
          stop = int_of(a.positional[1]);
          if (a.positional.size() == 3) stride = int_of(a.positional[2]);
        } else {
          return Status::error("range() takes 1 to 3 arguments");
        }
        if (stride == 0) return Status::error("range() step must not be zero");
        const double count = std::ceil((double(stop) - double(start)) / double(stride));
        if (count > double(in.limits().max_list_items))
          return Status::error("range() of " + format_python_float(count) + " items is too large");
        std::vector<Value> items;
        if (count > 0) {
          HEARTH_TRY(in.step(uint64_t(count)));
          for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
            items.push_back(Value::integer(i));
            if (int64_t(items.size()) >= int64_t(count)) break;
          }
        }
        return Value::list(std::move(items));
      },
      "range");
  frame["namespace"] = Value::callable(
      [](Interpreter&, const CallArgs& a) -> Result<Value> {
        Dict d;
        for (const auto& v : a.positional) {
          if (!v.is_dict()) return Status::error("namespace() takes keyword arguments or a dict");
          for (const auto& [k, x] : v.entries().entries) d.set(k, x);
        }
        for (const auto& [k, x] : a.keyword) d.set(k, x);
        return Value::namespace_object(std::move(d));
      },
      "namespace");
  frame["dict"] = Value::callable(
      [](Interpreter&, const CallArgs& a) -> Result<Value> {
        Dict d;
        for (const auto& [k, x] : a.keyword) d.set(k, x);
        return Value::dict(std::move(d));
      },
      "dict");
  frame["raise_exception"] = Value::callable(
      [](Interpreter&, const CallArgs& a) -> Result<Value> {
        const std::string msg = a.positional.empty() ? "" : a.positional[0].to_output();
        return Status::error("raise_exception: " + msg);
      },
      "raise_exception");
  const std::optional<int64_t> fixed = limits.fixed_time;
  frame["strftime_now"] = Value::callable(
      [fixed](Interpreter&, const CallArgs& a) -> Result<Value> {
        if (a.positional.empty() || !a.positional[0].is_string())
          return Status::error("strftime_now() needs a format string");
        const std::string& fmt = a.positional[0].as_string();
        if (fmt.size() > 256) return Status::error("strftime_now(): format too long");
        std::tm tm{};
        const std::time_t t = fixed ? std::time_t(*fixed) : std::time(nullptr);
        if (fixed)
          gmtime_r(&t, &tm);
        else
          localtime_r(&t, &tm);
        char buf[1024];
        const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
        if (n == 0 && !fmt.empty()) return Value::string("");
        return Value::string(std::string(buf, n));
      },
      "strftime_now");
}

}  // namespace hearth::jinja
