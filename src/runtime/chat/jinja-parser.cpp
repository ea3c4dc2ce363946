// Jinja parser: tokens to a syntax tree, with Jinja's operator precedence (filters and tests
// bind tighter than arithmetic). A new tag = a case in parse_statement plus a NodeKind.
#include <algorithm>
#include <initializer_list>

#include "runtime/chat/jinja-ast.h"

namespace hearth::jinja {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits)
      : t_(std::move(tokens)), limits_(limits) {}

  Result<NodeList> run() {
    std::string which;
    HEARTH_ASSIGN_OR_RETURN(NodeList nodes, parse_body({}, &which));
    return nodes;
  }

 private:
  // ---- token helpers ------------------------------------------------------------------------
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool at_op(const char* op) const { return cur().kind == TokenKind::Op && cur().text == op; }
  bool at_name(const char* name) const {
    return cur().kind == TokenKind::Name && cur().text == name;
  }
  void advance() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  Status error(const std::string& msg) const {
    return Status::error("template line " + std::to_string(cur().line) + ": " + msg);
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::End:
        return "end of template";
      case TokenKind::VarEnd:
        return "'}}'";
      case TokenKind::BlockEnd:
        return "'%}'";
      case TokenKind::Text:
        return "template text";
      case TokenKind::String:
        return "string";
      case TokenKind::Int:
      case TokenKind::Float:
        return "number";
      default:
        return "'" + t.text + "'";
    }
  }
  Status expect_op(const char* op) {
    if (!at_op(op)) return error(std::string("expected '") + op + "', found " + describe(cur()));
    advance();
    return Status::ok();
  }
  Status expect_block_end() {
    if (cur().kind != TokenKind::BlockEnd) return error("expected '%}', found " + describe(cur()));
    advance();
    return Status::ok();
  }
  Result<std::string> expect_name() {
    if (cur().kind != TokenKind::Name) return error("expected a name, found " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  // Nesting guard shared by statements and expressions.
  struct DepthGuard {
    Parser* p;
    ~DepthGuard() { --p->depth_; }
  };
  Status enter() {
    if (++depth_ > limits_.max_nesting) {
      return error("nesting deeper than " + std::to_string(limits_.max_nesting) + " levels");
    }
    return Status::ok();
  }

  ExprPtr make(ExprKind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = cur().line;
    return e;
  }

  // Records the subtree height and rejects trees taller than the nesting limit: operator and
  // postfix chains are built iteratively, so parser recursion alone does not bound them.
  Result<ExprPtr> seal(ExprPtr e) {
    int d = 0;
    for (const auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (const auto& [k, a] : e->kwargs) d = std::max(d, a->depth);
    e->depth = d + 1;
    if (e->depth > limits_.max_nesting)
      return error("expression nested deeper than " + std::to_string(limits_.max_nesting) +
                   " levels");
    return e;
  }

  // ---- statements ---------------------------------------------------------------------------
  // Parses until one of `ends` opens a block tag; the tag name is consumed and stored in *which.
  Result<NodeList> parse_body(std::initializer_list<const char*> ends, std::string* which) {
    HEARTH_TRY(enter());
    DepthGuard guard{this};
    NodeList nodes;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::End) {
        if (ends.size() == 0) return nodes;
        const char* closer = *(ends.end() - 1);  // the end tag is listed last
        return error(std::string("missing '{% ") + closer + " %}' before end of template");
      }
      if (t.kind == TokenKind::Text) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Text;
        n->line = t.line;
        n->text = t.text;
        nodes.push_back(std::move(n));
        advance();
        continue;
      }
      if (t.kind == TokenKind::VarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Output;
        n->line = t.line;
        advance();
        HEARTH_ASSIGN_OR_RETURN(n->expr, parse_tuple());
        if (cur().kind != TokenKind::VarEnd)
          return error("expected '}}', found " + describe(cur()));
        advance();
        nodes.push_back(std::move(n));
        continue;
      }
      if (t.kind != TokenKind::BlockBegin) return error("unexpected " + describe(t));
      advance();
      if (cur().kind != TokenKind::Name) return error("expected a tag name after '{%'");
      const std::string tag = cur().text;
      for (const char* e : ends) {
        if (tag == e) {
          advance();
          *which = tag;
          return nodes;
        }
      }
      HEARTH_ASSIGN_OR_RETURN(NodePtr node, parse_statement(tag));
      nodes.push_back(std::move(node));
    }
  }

  Result<NodePtr> parse_statement(const std::string& tag) {
    auto n = std::make_unique<Node>();
    n->line = cur().line;
    advance();  // the tag name
    std::string which;
    if (tag == "if") {
      n->kind = NodeKind::If;
      while (true) {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_expression(false));
        HEARTH_TRY(expect_block_end());
        HEARTH_ASSIGN_OR_RETURN(NodeList body, parse_body({"elif", "else", "endif"}, &which));
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (which != "elif") break;
      }
      if (which == "else") {
        HEARTH_TRY(expect_block_end());
        HEARTH_ASSIGN_OR_RETURN(n->else_body, parse_body({"endif"}, &which));
      }
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "for") {
      n->kind = NodeKind::For;
      const bool paren = at_op("(");
      if (paren) advance();
      do {
        if (!n->targets.empty()) advance();  // the comma
        HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
        n->targets.push_back(name);
      } while (at_op(","));
      if (paren) HEARTH_TRY(expect_op(")"));
      if (!at_name("in")) return error("expected 'in' in for loop, found " + describe(cur()));
      advance();
      HEARTH_ASSIGN_OR_RETURN(n->expr, parse_expression(false));
      if (at_name("if")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(n->filter, parse_expression(true));
      }
      if (at_name("recursive")) return error("recursive for loops are not supported");
      HEARTH_TRY(expect_block_end());
      ++loop_depth_;
      HEARTH_ASSIGN_OR_RETURN(n->body, parse_body({"else", "endfor"}, &which));
      --loop_depth_;
      if (which == "else") {
        HEARTH_TRY(expect_block_end());
        HEARTH_ASSIGN_OR_RETURN(n->else_body, parse_body({"endfor"}, &which));
      }
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "set") {
      HEARTH_ASSIGN_OR_RETURN(n->text, expect_name());
      if (at_op(".")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(n->attr, expect_name());
      }
      if (at_op("=")) {
        advance();
        n->kind = NodeKind::Set;
        HEARTH_ASSIGN_OR_RETURN(n->expr, parse_tuple());
        HEARTH_TRY(expect_block_end());
        return n;
      }
      if (!n->attr.empty()) return error("block set needs a plain name");
      n->kind = NodeKind::SetBlock;
      HEARTH_TRY(expect_block_end());
      HEARTH_ASSIGN_OR_RETURN(n->body, parse_body({"endset"}, &which));
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "macro") {
      n->kind = NodeKind::Macro;
      HEARTH_ASSIGN_OR_RETURN(n->text, expect_name());
      HEARTH_TRY(expect_op("("));
      while (!at_op(")")) {
        HEARTH_ASSIGN_OR_RETURN(std::string param, expect_name());
        ExprPtr def;
        if (at_op("=")) {
          advance();
          HEARTH_ASSIGN_OR_RETURN(def, parse_expression(true));
        }
        n->params.emplace_back(param, std::move(def));
        if (!at_op(",")) break;
        advance();
      }
      HEARTH_TRY(expect_op(")"));
      HEARTH_TRY(expect_block_end());
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // break/continue cannot cross a macro boundary
      HEARTH_ASSIGN_OR_RETURN(n->body, parse_body({"endmacro"}, &which));
      loop_depth_ = saved_loops;
      if (cur().kind == TokenKind::Name) advance();  // {% endmacro name %}
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return error("'" + tag + "' outside a for loop");
      n->kind = tag == "break" ? NodeKind::Break : NodeKind::Continue;
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "filter") {
      // {% filter trim | upper %}body{% endfilter %}: the chain applied to the rendered body.
      n->kind = NodeKind::FilterBlock;
      auto body = make(ExprKind::Name);
      body->name = kFilterBlockBody;
      HEARTH_ASSIGN_OR_RETURN(n->expr, seal(std::move(body)));
      HEARTH_ASSIGN_OR_RETURN(n->expr, parse_one_filter(std::move(n->expr)));
      while (at_op("|")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(n->expr, parse_one_filter(std::move(n->expr)));
      }
      HEARTH_TRY(expect_block_end());
      HEARTH_ASSIGN_OR_RETURN(n->body, parse_body({"endfilter"}, &which));
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag == "generation") {
      // Hugging Face's assistant-mask marker: renders its body unchanged.
      n->kind = NodeKind::Generation;
      HEARTH_TRY(expect_block_end());
      HEARTH_ASSIGN_OR_RETURN(n->body, parse_body({"endgeneration"}, &which));
      HEARTH_TRY(expect_block_end());
      return n;
    }
    if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else")
      return error("unexpected '{% " + tag + " %}'");
    return error("unsupported tag '" + tag + "'");
  }

  // ---- expressions --------------------------------------------------------------------------
  // `a, b` (a tuple, represented as a list) or a single expression.
  Result<ExprPtr> parse_tuple() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr first, parse_expression(true));
    if (!at_op(",")) return first;
    auto list = make(ExprKind::List);
    list->args.push_back(std::move(first));
    while (at_op(",")) {
      advance();
      if (cur().kind == TokenKind::VarEnd || cur().kind == TokenKind::BlockEnd) break;
      HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
      list->args.push_back(std::move(e));
    }
    return seal(std::move(list));
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    HEARTH_TRY(enter());
    DepthGuard guard{this};
    HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_or());
    while (with_condexpr && at_name("if")) {
      auto t = make(ExprKind::Ternary);
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr otherwise;
      if (at_name("else")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(otherwise, parse_expression(true));
      }
      t->args.push_back(std::move(cond));
      t->args.push_back(std::move(e));
      t->args.push_back(std::move(otherwise));
      HEARTH_ASSIGN_OR_RETURN(e, seal(std::move(t)));
    }
    return e;
  }

  Result<ExprPtr> binary(ExprKind kind, std::string op, ExprPtr l, ExprPtr r) {
    auto b = make(kind);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return seal(std::move(b));
  }

  Result<ExprPtr> parse_or() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_and());
    while (at_name("or")) {
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_and());
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::Or, "or", std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_and() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_not());
    while (at_name("and")) {
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_not());
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::And, "and", std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_not() {
    if (at_name("not")) {
      HEARTH_TRY(enter());
      DepthGuard guard{this};
      auto n = make(ExprKind::Not);
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      n->args.push_back(std::move(operand));
      return seal(std::move(n));
    }
    return parse_compare();
  }

  // Comparisons chain as in Python: a < b < c is (a < b) and (b < c), b evaluated once.
  Result<ExprPtr> parse_compare() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (at_name("in")) {
        op = "in";
        advance();
      } else if (at_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare);
        cmp->args.push_back(std::move(l));
      }
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(r));
    }
    if (cmp) return seal(std::move(cmp));
    return l;
  }

  Result<ExprPtr> parse_math1() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_concat());
    while (at_op("+") || at_op("-")) {
      std::string op = cur().text;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_concat());
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::Binary, op, std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_concat() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_math2());
    while (at_op("~")) {
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_math2());
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::Binary, "~", std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_math2() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_pow());
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      std::string op = cur().text;
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_pow());
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::Binary, op, std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_pow() {
    HEARTH_ASSIGN_OR_RETURN(ExprPtr l, parse_unary(true));
    while (at_op("**")) {
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr r, parse_unary(true));
      HEARTH_ASSIGN_OR_RETURN(l, binary(ExprKind::Binary, "**", std::move(l), std::move(r)));
    }
    return l;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    HEARTH_TRY(enter());
    DepthGuard guard{this};
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      node = make(at_op("-") ? ExprKind::Neg : ExprKind::Pos);
      advance();
      HEARTH_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      node->args.push_back(std::move(operand));
      HEARTH_ASSIGN_OR_RETURN(node, seal(std::move(node)));
    } else {
      HEARTH_ASSIGN_OR_RETURN(node, parse_primary());
    }
    HEARTH_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      HEARTH_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    if (t.kind == TokenKind::Name) {
      auto e = make(ExprKind::Literal);
      if (t.text == "true" || t.text == "True")
        e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        e->literal = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.kind == TokenKind::String) {
      auto e = make(ExprKind::Literal);
      std::string s;
      while (cur().kind == TokenKind::String) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::Int || t.kind == TokenKind::Float) {
      auto e = make(ExprKind::Literal);
      e->literal =
          t.kind == TokenKind::Int ? Value::integer(t.int_value) : Value::number(t.float_value);
      advance();
      return e;
    }
    if (at_op("(")) {
      advance();
      if (at_op(")")) {
        advance();
        return make(ExprKind::List);
      }
      HEARTH_ASSIGN_OR_RETURN(ExprPtr inner, parse_expression(true));
      if (at_op(",")) {
        auto list = make(ExprKind::List);
        list->args.push_back(std::move(inner));
        while (at_op(",")) {
          advance();
          if (at_op(")")) break;
          HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
          list->args.push_back(std::move(e));
        }
        HEARTH_ASSIGN_OR_RETURN(inner, seal(std::move(list)));
      }
      HEARTH_TRY(expect_op(")"));
      return inner;
    }
    if (at_op("[")) {
      auto list = make(ExprKind::List);
      advance();
      while (!at_op("]")) {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
        list->args.push_back(std::move(e));
        if (!at_op(",")) break;
        advance();
      }
      HEARTH_TRY(expect_op("]"));
      return seal(std::move(list));
    }
    if (at_op("{")) {
      auto dict = make(ExprKind::Dict);
      advance();
      while (!at_op("}")) {
        HEARTH_ASSIGN_OR_RETURN(ExprPtr k, parse_expression(true));
        HEARTH_TRY(expect_op(":"));
        HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        dict->args.push_back(std::move(k));
        dict->args.push_back(std::move(v));
        if (!at_op(",")) break;
        advance();
      }
      HEARTH_TRY(expect_op("}"));
      return seal(std::move(dict));
    }
    return error("unexpected " + describe(t));
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        advance();
        if (cur().kind == TokenKind::Int) {  // x.0 is x[0]
          auto g = make(ExprKind::GetItem);
          auto idx = make(ExprKind::Literal);
          idx->literal = Value::integer(cur().int_value);
          advance();
          g->args.push_back(std::move(node));
          g->args.push_back(std::move(idx));
          HEARTH_ASSIGN_OR_RETURN(node, seal(std::move(g)));
          continue;
        }
        auto g = make(ExprKind::GetAttr);
        HEARTH_ASSIGN_OR_RETURN(g->name, expect_name());
        g->args.push_back(std::move(node));
        HEARTH_ASSIGN_OR_RETURN(node, seal(std::move(g)));
      } else if (at_op("[")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (at_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_call(std::move(node), ExprKind::Call, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr target) {
    advance();  // [
    ExprPtr parts[3];
    int colons = 0;
    for (int part = 0; part < 3; ++part) {
      if (!at_op(":") && !at_op("]")) {
        HEARTH_ASSIGN_OR_RETURN(parts[part], parse_expression(true));
      }
      if (part < 2 && at_op(":")) {
        ++colons;
        advance();
        continue;
      }
      break;
    }
    HEARTH_TRY(expect_op("]"));
    if (colons == 0) {
      if (!parts[0]) return error("empty subscript");
      auto g = make(ExprKind::GetItem);
      g->args.push_back(std::move(target));
      g->args.push_back(std::move(parts[0]));
      return seal(std::move(g));
    }
    auto s = make(ExprKind::Slice);
    s->args.push_back(std::move(target));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return seal(std::move(s));
  }

  // Call arguments `(a, b, key=value)` for calls, filters and tests; args[0] is the subject.
  Result<ExprPtr> parse_call(ExprPtr subject, ExprKind kind, const std::string& name) {
    auto c = make(kind);
    c->name = name;
    c->args.push_back(std::move(subject));
    HEARTH_TRY(expect_op("("));
    while (!at_op(")")) {
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Op && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        c->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!c->kwargs.empty()) return error("positional argument after keyword argument");
        HEARTH_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        c->args.push_back(std::move(v));
      }
      if (!at_op(",")) break;
      advance();
    }
    HEARTH_TRY(expect_op(")"));
    return seal(std::move(c));
  }

  // One filter after its '|': `name` or `name(args)` applied to node.
  Result<ExprPtr> parse_one_filter(ExprPtr node) {
    HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
    if (at_op("(")) return parse_call(std::move(node), ExprKind::Filter, name);
    auto f = make(ExprKind::Filter);
    f->name = name;
    f->args.push_back(std::move(node));
    return seal(std::move(f));
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        advance();
        HEARTH_ASSIGN_OR_RETURN(node, parse_one_filter(std::move(node)));
      } else if (at_name("is")) {
        advance();
        bool negated = false;
        if (at_name("not")) {
          negated = true;
          advance();
        }
        HEARTH_ASSIGN_OR_RETURN(std::string name, expect_name());
        if (at_op("(")) {
          HEARTH_ASSIGN_OR_RETURN(node, parse_call(std::move(node), ExprKind::Test, name));
        } else {
          auto t = make(ExprKind::Test);
          t->name = name;
          t->args.push_back(std::move(node));
          const Token& c = cur();
          const bool arg_start =
              c.kind == TokenKind::String || c.kind == TokenKind::Int ||
              c.kind == TokenKind::Float ||
              (c.kind == TokenKind::Op && (c.text == "[" || c.text == "{")) ||
              (c.kind == TokenKind::Name && c.text != "else" && c.text != "or" && c.text != "and" &&
               c.text != "if" && c.text != "in" && c.text != "not" && c.text != "is");
          if (arg_start) {
            HEARTH_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
            HEARTH_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
            t->args.push_back(std::move(arg));
          }
          HEARTH_ASSIGN_OR_RETURN(node, seal(std::move(t)));
        }
        node->negated = negated;
      } else if (at_op("(")) {
        HEARTH_ASSIGN_OR_RETURN(node, parse_call(std::move(node), ExprKind::Call, ""));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  ParseLimits limits_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<NodeList> parse_template(std::string_view source, const ParseLimits& limits) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex_template(source));
  return Parser(std::move(tokens), limits).run();
}

}  // namespace hearth::jinja
