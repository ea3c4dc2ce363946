// Internal to the Jinja interpreter: tokens from the lexer and the syntax tree the parser builds.
// A new statement tag = a NodeKind + a parse_* case in jinja-parser.cpp + an exec case.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/chat/jinja-value.h"

namespace hearth::jinja {

enum class TokenKind {
  Text,        // literal template text (whitespace control already applied)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifiers and keywords
  String,      // quoted literal, escapes decoded
  Int,
  Float,
  Op,   // operators and punctuation
  End,  // end of template
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // Text, Name, String, Op
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Splits a template into tokens with Hugging Face's settings: trim_blocks, lstrip_blocks, `-`
// and `+` whitespace control, comments dropped, one trailing newline removed, raw blocks kept.
Result<std::vector<Token>> lex_template(std::string_view source);

enum class ExprKind {
  Literal,
  Name,
  List,
  Dict,
  GetAttr,
  GetItem,
  Slice,
  Call,
  Filter,
  Test,
  Neg,
  Pos,
  Not,
  And,
  Or,
  Binary,
  Compare,
  Ternary,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Literal;
  int line = 1;
  Value literal;                 // Literal
  std::string name;              // Name, GetAttr attribute, Filter/Test name, Binary/Compare op
  bool negated = false;          // Test: `is not`
  int depth = 1;                 // height of this subtree (bounded by the parser)
  std::vector<ExprPtr> args;     // operands; Slice: target,start,stop,step (null = omitted)
  std::vector<std::string> ops;  // Compare: ops[i] joins args[i] and args[i + 1]
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call/Filter/Test keyword arguments
};

enum class NodeKind {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  FilterBlock,
  Macro,
  Break,
  Continue,
  Generation
};

// The name a FilterBlock's filter chain reads its rendered body from (no template can spell it).
inline constexpr const char* kFilterBlockBody = "\x01filter-body";

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  NodeKind kind = NodeKind::Text;
  int line = 1;
  std::string text;                  // Text; Set/SetBlock/Macro: the target name
  std::string attr;                  // Set: `ns.attr` target attribute (empty = plain name)
  ExprPtr expr;                      // Output, Set value, For iterable, FilterBlock chain
  ExprPtr filter;                    // For: `for x in xs if cond`
  std::vector<std::string> targets;  // For loop variables
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // If/elif
  NodeList body;       // For, SetBlock, FilterBlock, Macro, Generation
  NodeList else_body;  // If, For
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null)
};

struct ParseLimits {
  int max_nesting = 200;  // bounds parser recursion so hostile nesting cannot overflow the stack
};

Result<NodeList> parse_template(std::string_view source, const ParseLimits& limits);

}  // namespace hearth::jinja
