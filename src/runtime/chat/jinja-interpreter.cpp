// Jinja evaluator: walks the syntax tree with Python/Jinja semantics (scoping, truthiness,
// operators), charging every step to a budget. New expression kinds get a case in eval_inner.
#include "runtime/chat/jinja-interpreter.h"

#include <cmath>

namespace hearth::jinja {

namespace {

Status at_line(int line, const Status& s) {
  if (s.is_ok() || s.message().rfind("template line ", 0) == 0) return s;
  return Status::error("template line " + std::to_string(line) + ": " + s.message());
}

std::string kind_name(const Value& v) {
  return v.type_name();
}

}  // namespace

Interpreter::Interpreter(const Limits& limits, const Variables& vars) : limits_(limits) {
  frames_.emplace_back();
  install_globals(frames_[0], limits_);
  for (const auto& [k, v] : vars) frames_[0][k] = v;
  frames_.emplace_back();
}

Status Interpreter::step(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    return Status::error("template exceeded its step budget (" + std::to_string(limits_.max_steps) +
                         " steps): infinite or runaway loop?");
  return Status::ok();
}

Status Interpreter::check_size(uint64_t size, const char* what) const {
  if (size > limits_.max_output_bytes)
    return Status::error(std::string(what) + " would exceed the limit of " +
                         std::to_string(limits_.max_output_bytes) + " bytes");
  return Status::ok();
}

Status Interpreter::emit(const std::string& text) {
  HEARTH_TRY(check_size(uint64_t(out_.size()) + text.size(), "rendered output"));
  HEARTH_TRY(step(1 + text.size() / 64));
  out_ += text;
  return Status::ok();
}

Value Interpreter::lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > 0;) {
    if (i < barrier_ && i > 1) continue;  // a macro sees its own frames and the top level only
    auto it = frames_[i].find(name);
    if (it != frames_[i].end()) return it->second;
  }
  return Value::undefined(name);
}

Result<std::string> Interpreter::run(const NodeList& nodes) {
  HEARTH_ASSIGN_OR_RETURN(Flow flow, exec(nodes));
  (void)flow;
  return std::move(out_);
}

Result<Interpreter::Flow> Interpreter::exec(const NodeList& nodes) {
  for (const auto& n : nodes) {
    HEARTH_ASSIGN_OR_RETURN(Flow f, exec_node(*n));
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Result<Interpreter::Flow> Interpreter::exec_node(const Node& n) {
  HEARTH_TRY(at_line(n.line, enter()));
  auto r = exec_node_inner(n);
  --depth_;
  return r;
}

Result<Interpreter::Flow> Interpreter::exec_node_inner(const Node& n) {
  HEARTH_TRY(at_line(n.line, step()));
  switch (n.kind) {
    case NodeKind::Text:
      HEARTH_TRY(at_line(n.line, emit(n.text)));
      return Flow::Normal;
    case NodeKind::Output: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
      HEARTH_TRY(at_line(n.line, emit(v.to_output())));
      return Flow::Normal;
    }
    case NodeKind::If: {
      for (const auto& [cond, body] : n.branches) {
        HEARTH_ASSIGN_OR_RETURN(Value c, eval(*cond));
        if (c.truthy()) return exec(body);
      }
      return exec(n.else_body);
    }
    case NodeKind::For:
      return exec_for(n);
    case NodeKind::Set:
      HEARTH_TRY(exec_set(n));
      return Flow::Normal;
    case NodeKind::SetBlock:
    case NodeKind::FilterBlock: {
      std::string saved;
      std::swap(saved, out_);
      auto r = exec(n.body);
      std::swap(saved, out_);
      if (!r.is_ok()) return r.status();
      if (n.kind == NodeKind::SetBlock) {
        assign(n.text, Value::string(std::move(saved)));
        return Flow::Normal;
      }
      assign(kFilterBlockBody, Value::string(std::move(saved)));
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
      HEARTH_TRY(at_line(n.line, emit(v.to_output())));
      return Flow::Normal;
    }
    case NodeKind::Macro: {
      const Node* node = &n;
      assign(n.text,
             Value::callable([node](Interpreter& in,
                                    const CallArgs& args) { return in.call_macro(*node, args); },
                             n.text));
      return Flow::Normal;
    }
    case NodeKind::Break:
      return Flow::Break;
    case NodeKind::Continue:
      return Flow::Continue;
    case NodeKind::Generation:
      return exec(n.body);
  }
  return Flow::Normal;
}

Status Interpreter::exec_set(const Node& n) {
  HEARTH_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
  if (n.attr.empty()) {
    assign(n.text, std::move(v));
    return Status::ok();
  }
  Value target = lookup(n.text);
  // Only namespace() objects accept attribute assignment, as in Jinja.
  if (!target.is_namespace())
    return at_line(n.line, Status::error("cannot assign attribute '" + n.attr + "' on '" + n.text +
                                         "' (" + kind_name(target) + "): use namespace()"));
  uint64_t walked = 0;
  const Nesting nest = nesting_of(v, target.dict_storage(), kMaxNamespaceNesting, &walked);
  HEARTH_TRY(step(1 + walked / 16));
  if (nest.holds_dict || nest.depth >= kMaxNamespaceNesting)
    return at_line(n.line, Status::error("cannot store that in '" + n.text + "." + n.attr +
                                         (nest.holds_dict ? "': it holds the namespace itself"
                                                          : "': it nests too deep")));
  target.entries().set(n.attr, std::move(v));
  return Status::ok();
}

Result<Interpreter::Flow> Interpreter::exec_for(const Node& n) {
  HEARTH_ASSIGN_OR_RETURN(Value iterable, eval(*n.expr));
  auto items_r = iterate(iterable);
  if (!items_r.is_ok()) return at_line(n.line, items_r.status());
  std::vector<Value> items = std::move(items_r).value();
  frames_.emplace_back();
  // Targets are bound before the `if` filter runs, then the survivors become the loop.
  auto bind = [&](const Value& item) -> Status {
    if (n.targets.size() == 1) {
      assign(n.targets[0], item);
      return Status::ok();
    }
    HEARTH_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(item));
    if (parts.size() != n.targets.size())
      return at_line(
          n.line, Status::error("cannot unpack " + std::to_string(parts.size()) + " values into " +
                                std::to_string(n.targets.size()) + " loop variables"));
    for (size_t k = 0; k < parts.size(); ++k) assign(n.targets[k], parts[k]);
    return Status::ok();
  };
  auto result = [&]() -> Result<Flow> {
    if (n.filter) {
      std::vector<Value> kept;
      for (auto& item : items) {
        HEARTH_TRY(at_line(n.line, step()));
        HEARTH_TRY(bind(item));
        HEARTH_ASSIGN_OR_RETURN(Value keep, eval(*n.filter));
        if (keep.truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      HEARTH_TRY(at_line(n.line, step()));
      HEARTH_TRY(bind(items[size_t(i)]));
      Dict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(len - i));
      loop.set("revindex0", Value::integer(len - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("loop.previtem"));
      loop.set("nextitem", i + 1 < len ? items[size_t(i + 1)] : Value::undefined("loop.nextitem"));
      loop.set("cycle", Value::callable(
                            [i](Interpreter&, const CallArgs& args) -> Result<Value> {
                              if (args.positional.empty())
                                return Status::error("loop.cycle() needs at least one value");
                              return args.positional[size_t(i) % args.positional.size()];
                            },
                            "loop.cycle"));
      assign("loop", Value::dict(std::move(loop)));
      HEARTH_ASSIGN_OR_RETURN(Flow f, exec(n.body));
      if (f == Flow::Break) break;
    }
    if (len == 0) return exec(n.else_body);
    return Flow::Normal;
  }();
  frames_.pop_back();
  if (!result.is_ok()) return result.status();
  return Flow::Normal;
}

Result<Value> Interpreter::call_macro(const Node& macro, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    return Status::error("macro '" + macro.text + "' recursed deeper than " +
                         std::to_string(limits_.max_call_depth) + " calls");
  if (args.positional.size() > macro.params.size())
    return Status::error("macro '" + macro.text + "' takes " + std::to_string(macro.params.size()) +
                         " arguments, got " + std::to_string(args.positional.size()));
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& p : macro.params) known = known || p.first == k;
    if (!known) return Status::error("macro '" + macro.text + "' has no argument '" + k + "'");
  }
  const size_t saved_barrier = barrier_;
  frames_.emplace_back();
  barrier_ = frames_.size() - 1;
  ++call_depth_;
  std::string saved_out;
  std::swap(saved_out, out_);
  auto body = [&]() -> Status {
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, def] = macro.params[i];
      if (const Value* v = args.get(i, name)) {
        assign(name, *v);
      } else if (def) {
        HEARTH_ASSIGN_OR_RETURN(Value d, eval(*def));
        assign(name, std::move(d));
      } else {
        assign(name, Value::undefined(name));
      }
    }
    HEARTH_ASSIGN_OR_RETURN(Flow f, exec(macro.body));
    (void)f;
    return Status::ok();
  }();
  std::swap(saved_out, out_);
  --call_depth_;
  frames_.pop_back();
  barrier_ = saved_barrier;
  if (!body.is_ok()) return body;
  return Value::string(std::move(saved_out));
}

Result<Value> Interpreter::call(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) return Status::error("'" + fn.as_string() + "' is undefined");
  if (!fn.is_callable()) return Status::error("a " + kind_name(fn) + " is not callable");
  HEARTH_TRY(step());
  return fn.function()(*this, args);
}

Result<std::vector<Value>> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return std::vector<Value>{};
    case Value::Kind::List:
      return v.items();
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.entries().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (auto c : utf8_chars(v.as_string())) chars.push_back(Value::string(std::string(c)));
      return chars;
    }
    default:
      return Status::error("a " + kind_name(v) + " is not iterable");
  }
}

Result<Value> Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_')
    return Status::error("access to attribute '" + name + "' is not allowed");
  if (obj.is_undefined())
    return Status::error("'" + obj.as_string() + "' is undefined (reading ." + name + ")");
  if (obj.is_dict()) {
    // Jinja tries the Python attribute first: d.items is the method, d.role the key.
    if (!obj.is_namespace()) {
      Value m = find_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.entries().find(name)) return *v;
    return Value::undefined(name);
  }
  Value m = find_method(obj, name);
  if (!m.is_undefined()) return m;
  return Value::undefined(name);
}

Result<Value> Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined())
    return Status::error("'" + obj.as_string() + "' is undefined (indexing it)");
  if (obj.is_dict()) {
    if (!key.is_string()) return Value::undefined(key.to_output());
    if (const Value* v = obj.entries().find(key.as_string())) return *v;
    return Value::undefined(key.as_string());
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.is_string()) return get_attr(obj, key.as_string());
    if (!is_intlike(key)) return Status::error("indices must be integers, not " + kind_name(key));
    int64_t i = int_of(key);
    if (obj.is_list()) {
      const int64_t n = int64_t(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("[" + std::to_string(int_of(key)) + "]");
      return obj.items()[size_t(i)];
    }
    const auto chars = utf8_chars(obj.as_string());
    const int64_t n = int64_t(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("[" + std::to_string(int_of(key)) + "]");
    return Value::string(std::string(chars[size_t(i)]));
  }
  return Value::undefined(key.to_output());
}

Result<Value> Interpreter::slice(const Value& target, const Value& start_v, const Value& stop_v,
                                 const Value& step_v) {
  auto opt_int = [](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>{};
    if (!is_intlike(v)) return Status::error(std::string("slice ") + what + " must be an integer");
    return std::optional<int64_t>(int_of(v));
  };
  HEARTH_ASSIGN_OR_RETURN(auto start, opt_int(start_v, "start"));
  HEARTH_ASSIGN_OR_RETURN(auto stop, opt_int(stop_v, "stop"));
  HEARTH_ASSIGN_OR_RETURN(auto stride, opt_int(step_v, "step"));
  const int64_t st = stride.value_or(1);
  if (st == 0) return Status::error("slice step cannot be zero");
  std::vector<std::string_view> chars;
  int64_t n = 0;
  if (target.is_list())
    n = int64_t(target.items().size());
  else if (target.is_string()) {
    chars = utf8_chars(target.as_string());
    n = int64_t(chars.size());
  } else if (target.is_undefined()) {
    return Status::error("'" + target.as_string() + "' is undefined (slicing it)");
  } else {
    return Status::error("a " + kind_name(target) + " cannot be sliced");
  }
  // Python's slice.indices(): clamp, then walk.
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t lo = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t hi = clamp(stop, st > 0 ? n : -1);
  std::vector<Value> items;
  std::string text;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
    if (target.is_list())
      items.push_back(target.items()[size_t(i)]);
    else
      text += chars[size_t(i)];
  }
  HEARTH_TRY(step(1 + uint64_t(items.size() + text.size() / 16)));
  if (target.is_list()) return Value::list(std::move(items));
  return Value::string(std::move(text));
}

Result<CallArgs> Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    HEARTH_ASSIGN_OR_RETURN(Value v, eval(*x));
    args.keyword.emplace_back(k, std::move(v));
  }
  return args;
}

Status Interpreter::enter() {
  if (++depth_ > kMaxEvalDepth) {
    --depth_;
    return Status::error("evaluation nested deeper than " + std::to_string(kMaxEvalDepth) +
                         " levels (recursive macros?)");
  }
  return Status::ok();
}

Result<Value> Interpreter::eval(const Expr& e) {
  HEARTH_TRY(at_line(e.line, enter()));
  auto r = eval_inner(e);
  --depth_;
  if (!r.is_ok()) return at_line(e.line, r.status());
  return r;
}

Result<Value> Interpreter::eval_inner(const Expr& e) {
  HEARTH_TRY(step());
  switch (e.kind) {
    case ExprKind::Literal:
      return e.literal;
    case ExprKind::Name:
      return lookup(e.name);
    case ExprKind::List: {
      std::vector<Value> items;
      for (const auto& a : e.args) {
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*a));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case ExprKind::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        HEARTH_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
        HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
        if (!k.is_string()) return Status::error("dict keys must be strings, got " + kind_name(k));
        d.set(k.as_string(), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::GetAttr: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      return get_attr(obj, e.name);
    }
    case ExprKind::GetItem: {
      HEARTH_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      HEARTH_ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
      return get_item(obj, key);
    }
    case ExprKind::Slice: {
      HEARTH_ASSIGN_OR_RETURN(Value target, eval(*e.args[0]));
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (e.args[size_t(i) + 1]) {
          HEARTH_ASSIGN_OR_RETURN(parts[i], eval(*e.args[size_t(i) + 1]));
        }
      return slice(target, parts[0], parts[1], parts[2]);
    }
    case ExprKind::Call: {
      HEARTH_ASSIGN_OR_RETURN(Value fn, eval(*e.args[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      return call(fn, args);
    }
    case ExprKind::Filter: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      return apply_filter(*this, e.name, subject, args);
    }
    case ExprKind::Test: {
      HEARTH_ASSIGN_OR_RETURN(Value subject, eval(*e.args[0]));
      HEARTH_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      HEARTH_ASSIGN_OR_RETURN(bool t, apply_test(*this, e.name, subject, args));
      return Value::boolean(t != e.negated);
    }
    case ExprKind::Neg:
    case ExprKind::Pos: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      if (!v.is_number() && !v.is_bool())
        return Status::error("bad operand type for unary " +
                             std::string(e.kind == ExprKind::Neg ? "-" : "+") + ": " +
                             kind_name(v));
      if (e.kind == ExprKind::Pos) return v.is_bool() ? Value::integer(int_of(v)) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (int_of(v) == INT64_MIN) return Status::error("integer overflow in negation");
      return Value::integer(-int_of(v));
    }
    case ExprKind::Not: {
      HEARTH_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return Value::boolean(!v.truthy());
    }
    case ExprKind::And:
    case ExprKind::Or: {
      // Python semantics: the deciding operand itself is the result.
      HEARTH_ASSIGN_OR_RETURN(Value l, eval(*e.args[0]));
      if ((e.kind == ExprKind::And) != l.truthy()) return l;
      return eval(*e.args[1]);
    }
    case ExprKind::Binary: {
      HEARTH_ASSIGN_OR_RETURN(Value l, eval(*e.args[0]));
      HEARTH_ASSIGN_OR_RETURN(Value r, eval(*e.args[1]));
      return binary(e.name, l, r);
    }
    case ExprKind::Compare: {
      HEARTH_ASSIGN_OR_RETURN(Value l, eval(*e.args[0]));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        HEARTH_ASSIGN_OR_RETURN(Value r, eval(*e.args[i + 1]));
        HEARTH_ASSIGN_OR_RETURN(bool ok, compare(e.ops[i], l, r));
        if (!ok) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case ExprKind::Ternary: {
      HEARTH_ASSIGN_OR_RETURN(Value c, eval(*e.args[0]));
      if (c.truthy()) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("ternary else");
    }
  }
  return Status::error("unknown expression");
}

Result<bool> Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") {
    HEARTH_ASSIGN_OR_RETURN(bool c, contains(b, a));
    return !c;
  }
  int cmp = 0;
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (is_intlike(a) && is_intlike(b))
      cmp = int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b);
    else {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) return false;
      cmp = x < y ? -1 : x > y;
    }
  } else if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    cmp = c < 0 ? -1 : c > 0;
  } else {
    return Status::error("'" + op + "' not supported between " + kind_name(a) + " and " +
                         kind_name(b));
  }
  if (op == "<") return cmp < 0;
  if (op == ">") return cmp > 0;
  if (op == "<=") return cmp <= 0;
  return cmp >= 0;
}

Result<Value> Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.to_output();
    const std::string t = b.to_output();
    HEARTH_TRY(check_size(uint64_t(s.size()) + t.size(), "string"));
    HEARTH_TRY(step(1 + (s.size() + t.size()) / 64));
    return Value::string(s + t);
  }
  const bool nums = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const bool ints = is_intlike(a) && is_intlike(b);
  auto type_error = [&]() -> Status {
    return Status::error("unsupported operand types for " + op + ": " + kind_name(a) + " and " +
                         kind_name(b));
  };
  // + - * on numbers: exact on two integers (an error on overflow: Python never wraps), else
  // in doubles.
  auto arithmetic = [&]() -> Result<Value> {
    const char c = op[0];
    if (ints) {
      const int64_t x = int_of(a), y = int_of(b);
      int64_t r;
      const bool overflow = c == '+'   ? __builtin_add_overflow(x, y, &r)
                            : c == '-' ? __builtin_sub_overflow(x, y, &r)
                                       : __builtin_mul_overflow(x, y, &r);
      if (overflow) return Status::error("integer overflow in " + op);
      return Value::integer(r);
    }
    if (!nums) return type_error();
    const double x = a.as_double(), y = b.as_double();
    return Value::number(c == '+' ? x + y : c == '-' ? x - y : x * y);
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      HEARTH_TRY(check_size(uint64_t(a.as_string().size()) + b.as_string().size(), "string"));
      HEARTH_TRY(step(1 + (a.as_string().size() + b.as_string().size()) / 64));
      if (!a.is_markup() && !b.is_markup()) return Value::string(a.as_string() + b.as_string());
      // Markup + str escapes the str (and str + Markup too): `"x"|safe + name` in a template
      // HTML-escapes name, as jinja2 renders it.
      std::string s = a.is_markup() ? a.as_string() : html_escape(a.as_string());
      s += b.is_markup() ? b.as_string() : html_escape(b.as_string());
      HEARTH_TRY(check_size(s.size(), "string"));
      return Value::markup(std::move(s));
    }
    if (a.is_list() && b.is_list()) {
      const uint64_t n = uint64_t(a.items().size()) + b.items().size();
      if (n > limits_.max_list_items)
        return Status::error("list would exceed " + std::to_string(limits_.max_list_items) +
                             " items");
      HEARTH_TRY(step(1 + n));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items));
    }
    return arithmetic();
  }
  if (op == "-") return arithmetic();
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return binary(op, b, a);
    if (is_intlike(a) && (b.is_string() || b.is_list())) {
      const int64_t times = std::max<int64_t>(0, int_of(a));
      const uint64_t unit = b.is_string() ? b.as_string().size() : b.items().size();
      const uint64_t cap = b.is_string() ? limits_.max_output_bytes : limits_.max_list_items;
      // Nothing repeated is nothing, however many times (a loop of 10^14 turns otherwise).
      if (unit == 0) return b.is_string() ? Value::string("") : Value::list();
      if (uint64_t(times) > cap / unit)
        return Status::error(std::string(b.is_string() ? "string" : "list") +
                             " repetition would exceed the limit of " + std::to_string(cap));
      HEARTH_TRY(step(1 + uint64_t(times) * unit / 16));
      if (b.is_string()) {
        std::string s;
        s.reserve(size_t(times) * unit);
        for (int64_t i = 0; i < times; ++i) s += b.as_string();
        return Value::string(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i)
        items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items));
    }
    return arithmetic();
  }
  if (!nums) return type_error();
  if (op == "/") {
    if (b.as_double() == 0.0) return Status::error("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = int_of(a), y = int_of(b);
      if (y == 0) return Status::error(op == "//" ? "integer division by zero" : "modulo by zero");
      if (x == INT64_MIN && y == -1) return Status::error("integer overflow in " + op);
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0.0)
      return Status::error(op == "//" ? "float division by zero" : "float modulo by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::number(r);
  }
  if (op == "**") {
    if (ints && int_of(b) >= 0) {
      int64_t base = int_of(a), e = int_of(b), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) return Status::error("integer overflow in **");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base))
          return Status::error("integer overflow in **");
      }
      return Value::integer(r);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  return type_error();
}

}  // namespace hearth::jinja
