// Pattern text -> syntax tree -> backtracking program (split-regex.h). Counted repeats are
// unrolled, possessive repeats become atomic groups, so the matcher has few instructions.
#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <cctype>
#include <functional>
#include <optional>

#include "tokenizer/split-regex.h"
#include "tokenizer/utf8.h"

namespace hearth::split_regex {
namespace {

constexpr int kUnbounded = -1;
constexpr int kMaxRepeat = 1000;  // {n,m} bounds past this are refused (the program unrolls them)

struct Node {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat, kLook, kAtomic, kAnchor } kind = kEmpty;
  uint32_t set = 0;         // kSet: index into Program::sets
  Op anchor = Op::kMatch;   // kAnchor: kLineStart, kLineEnd or kWordEdge
  uint32_t anchor_arg = 0;  // kWordEdge: 1 for \B; kLook: 1 for (?!...)
  std::vector<Node> kids;
  int min = 1, max = 1;
  bool greedy = true, possessive = false;
};

class Parser {
 public:
  static constexpr int kMaxGroupDepth = 64;

  Parser(std::string_view p, Program& prog) : p_(p), prog_(prog) {}

  Result<Node> parse() {
    HEARTH_ASSIGN_OR_RETURN(Node n, alternation());
    if (pos_ < p_.size()) return error("unbalanced ')'");
    return n;
  }

 private:
  Status error(const std::string& what) const {
    return Status::error("regex at byte " + std::to_string(pos_) + ": " + what);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  uint32_t next_code_point() {
    uint32_t cp = 0;
    const int len = utf8::decode(p_, pos_, &cp);
    if (len <= 0) {
      cp = static_cast<uint8_t>(p_[pos_]);
      ++pos_;
    } else {
      pos_ += len;
    }
    return cp;
  }

  Node set_node(CharSet s) {
    s.ignore_case = s.ignore_case || icase_;
    prog_.sets.push_back(std::move(s));
    Node n;
    n.kind = Node::kSet;
    n.set = static_cast<uint32_t>(prog_.sets.size() - 1);
    return n;
  }
  static CharSet single(uint32_t cp) {
    CharSet s;
    s.ranges.emplace_back(cp, cp);
    return s;
  }

  Result<Node> alternation() {
    Node alt;
    alt.kind = Node::kAlt;
    const bool saved_icase = icase_;
    while (true) {
      HEARTH_ASSIGN_OR_RETURN(Node c, concatenation());
      alt.kids.push_back(std::move(c));
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    icase_ = saved_icase;  // an inline (?i) lasts to the end of its group
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Result<Node> concatenation() {
    Node cat;
    cat.kind = Node::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      HEARTH_ASSIGN_OR_RETURN(std::optional<Node> a, atom());
      if (!a) continue;  // an inline flag group such as (?i)
      HEARTH_ASSIGN_OR_RETURN(Node r, quantified(std::move(*a)));
      cat.kids.push_back(std::move(r));
    }
    return cat;
  }

  // Reads {n}, {n,}, {n,m} at pos_; false (pos_ unchanged) when the text is not a quantifier,
  // in which case '{' is a literal as Oniguruma reads it.
  bool braces(int* min, int* max) {
    size_t q = pos_ + 1;
    auto number = [&](int* out) {
      const size_t start = q;
      long v = 0;
      while (q < p_.size() && p_[q] >= '0' && p_[q] <= '9' && v <= kMaxRepeat) {
        v = v * 10 + (p_[q++] - '0');
      }
      *out = static_cast<int>(v);
      return q > start;
    };
    int lo = 0, hi = 0;
    const bool has_lo = number(&lo);
    if (q < p_.size() && p_[q] == '}') {
      if (!has_lo) return false;
      hi = lo;
    } else if (q < p_.size() && p_[q] == ',') {
      ++q;
      if (!number(&hi)) hi = kUnbounded;
      if (!has_lo) lo = 0;
      if (q >= p_.size() || p_[q] != '}') return false;
    } else {
      return false;
    }
    pos_ = q + 1;
    *min = lo;
    *max = hi;
    return true;
  }

  Result<Node> quantified(Node a) {
    // One quantifier (with its lazy '?' or possessive '+'), as Python's re: a second one is
    // its "multiple repeat" error (each would also double the program: a+++... grew as 2^n).
    for (int count = 0; !at_end(); ++count) {
      int min, max;
      const char c = peek();
      if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '*') {
        min = 0, max = kUnbounded, ++pos_;
      } else if (c == '+') {
        min = 1, max = kUnbounded, ++pos_;
      } else if (c == '{' && braces(&min, &max)) {
        if (min > kMaxRepeat || max > kMaxRepeat) return error("repeat count above 1000");
        if (max != kUnbounded && max < min) return error("repeat {n,m} with m < n");
      } else {
        break;
      }
      if (count > 0) return error("multiple repeat");
      if (a.kind == Node::kAnchor || a.kind == Node::kLook) {
        return error("quantifier after an assertion");
      }
      Node r;
      r.kind = Node::kRepeat;
      r.min = min, r.max = max;
      if (!at_end() && peek() == '?') {
        r.greedy = false, ++pos_;
      } else if (!at_end() && peek() == '+' && c != '{') {
        r.possessive = true, ++pos_;
      }
      r.kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  Result<std::optional<Node>> group() {
    // Groups recurse (group -> alternation -> atom -> group), and a model's files bring the
    // pattern: a bound keeps a hostile one from overflowing the stack. Published patterns nest
    // two or three deep.
    if (depth_ >= kMaxGroupDepth)
      return error("groups nested deeper than " + std::to_string(kMaxGroupDepth));
    ++depth_;
    auto g = group_body();
    --depth_;
    return g;
  }

  Result<std::optional<Node>> group_body() {
    ++pos_;  // '('
    Node n;
    bool wrap = false;
    bool saved_icase = icase_;
    if (!at_end() && peek() == '?') {
      ++pos_;
      if (at_end()) return error("unterminated group");
      const char k = peek();
      if (k == ':') {
        ++pos_;
      } else if (k == '=' || k == '!') {
        ++pos_;
        n.kind = Node::kLook;
        n.anchor_arg = k == '!';
        wrap = true;
      } else if (k == '>') {
        ++pos_;
        n.kind = Node::kAtomic;
        wrap = true;
      } else if (k == '<' && pos_ + 1 < p_.size() && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) {
        return error("look-behind (?<=...) / (?<!...) is not supported");
      } else if (k == '<' || k == '\'') {  // a named group: its name does not matter here
        const char close = k == '<' ? '>' : '\'';
        while (!at_end() && peek() != close) ++pos_;
        if (at_end()) return error("unterminated group name");
        ++pos_;
      } else {
        bool on = true, any = false;
        bool flag_icase = icase_;
        while (!at_end() && peek() != ':' && peek() != ')') {
          const char f = peek();
          if (f == '-') {
            on = false;
          } else if (f == 'i') {
            flag_icase = on;
          } else if (f != 'x' && f != 'm') {
            return error(std::string("unsupported group flag '") + f + "'");
          }
          any = true;
          ++pos_;
        }
        if (at_end() || !any) return error("unterminated group");
        if (peek() == ')') {  // (?i): applies to the rest of the enclosing group
          ++pos_;
          icase_ = flag_icase;
          return std::optional<Node>();
        }
        ++pos_;  // ':'
        icase_ = flag_icase;
      }
    }
    HEARTH_ASSIGN_OR_RETURN(Node body, alternation());
    icase_ = saved_icase;
    if (at_end() || peek() != ')') return error("missing ')'");
    ++pos_;
    if (!wrap) return std::optional<Node>(std::move(body));
    n.kids.push_back(std::move(body));
    return std::optional<Node>(std::move(n));
  }

  Result<std::optional<Node>> atom() {
    const char c = peek();
    if (c == '(') return group();
    if (c == '[') {
      HEARTH_ASSIGN_OR_RETURN(CharSet s, bracket());
      return std::optional<Node>(set_node(std::move(s)));
    }
    if (c == '*' || c == '+' || c == '?')
      return error(std::string("nothing to repeat before '") + c + "'");
    if (c == '.') {
      ++pos_;
      CharSet s = single('\n');
      s.negated = true;
      return std::optional<Node>(set_node(std::move(s)));
    }
    if (c == '^' || c == '$') {
      ++pos_;
      Node n;
      n.kind = Node::kAnchor;
      n.anchor = c == '^' ? Op::kLineStart : Op::kLineEnd;
      return std::optional<Node>(std::move(n));
    }
    if (c == '\\') {
      if (pos_ + 1 < p_.size() && (p_[pos_ + 1] == 'b' || p_[pos_ + 1] == 'B')) {
        Node n;
        n.kind = Node::kAnchor;
        n.anchor = Op::kWordEdge;
        n.anchor_arg = p_[pos_ + 1] == 'B';
        pos_ += 2;
        return std::optional<Node>(std::move(n));
      }
      HEARTH_ASSIGN_OR_RETURN(CharSet s, escape(/*in_class=*/false));
      return std::optional<Node>(set_node(std::move(s)));
    }
    return std::optional<Node>(set_node(single(next_code_point())));
  }

  Result<uint32_t> hex(size_t max_digits, bool braced) {
    uint32_t v = 0;
    size_t n = 0;
    while (!at_end() && n < max_digits && std::isxdigit(static_cast<unsigned char>(peek()))) {
      const char h = peek();
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++pos_, ++n;
    }
    if (n == 0 || v > 0x10FFFF) return error("bad hexadecimal escape");
    if (braced) {
      if (at_end() || peek() != '}') return error("missing '}' after \\x{");
      ++pos_;
    }
    return v;
  }

  Result<CharSet> property(bool negated) {
    bool braced = !at_end() && peek() == '{';
    std::string name;
    if (braced) {
      ++pos_;
      if (!at_end() && peek() == '^') negated = !negated, ++pos_;
      while (!at_end() && peek() != '}') name.push_back(p_[pos_++]);
      if (at_end()) return error("missing '}' after \\p{");
      ++pos_;
    } else if (!at_end()) {
      name.push_back(p_[pos_++]);  // \pL
    }
    CharSet s;
    Property prop;
    prop.negated = negated;
    const int32_t gc = u_getPropertyValueEnum(UCHAR_GENERAL_CATEGORY_MASK, name.c_str());
    if (gc != UCHAR_INVALID_CODE) {
      prop.kind = Property::kCategoryMask;
      prop.value = static_cast<uint32_t>(gc);
    } else if (const int32_t sc = u_getPropertyValueEnum(UCHAR_SCRIPT, name.c_str());
               sc != UCHAR_INVALID_CODE) {
      prop.kind = Property::kScript;
      prop.value = static_cast<uint32_t>(sc);
    } else {
      return error("unknown Unicode property \\p{" + name + "}");
    }
    s.properties.push_back(prop);
    return s;
  }

  // After '\': one code point (as a one-range set) or a class escape.
  Result<CharSet> escape(bool in_class) {
    ++pos_;
    if (at_end()) return error("pattern ends with '\\'");
    const char e = p_[pos_++];
    auto prop = [](Property::Kind k, uint32_t v, bool neg) {
      CharSet s;
      s.properties.push_back(Property{k, v, neg});
      return s;
    };
    switch (e) {
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 't':
        return single('\t');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case 'a':
        return single('\a');
      case 'e':
        return single(0x1B);
      case '0':
        return single(0);
      case 's':
        return prop(Property::kWhiteSpace, 0, false);
      case 'S':
        return prop(Property::kWhiteSpace, 0, true);
      case 'd':
        return prop(Property::kCategoryMask, U_GC_ND_MASK, false);
      case 'D':
        return prop(Property::kCategoryMask, U_GC_ND_MASK, true);
      case 'w':
        return prop(Property::kWord, 0, false);
      case 'W':
        return prop(Property::kWord, 0, true);
      case 'p':
        return property(false);
      case 'P':
        return property(true);
      case 'x': {
        const bool braced = !at_end() && peek() == '{';
        if (braced) ++pos_;
        HEARTH_ASSIGN_OR_RETURN(uint32_t v, hex(braced ? 8 : 2, braced));
        return single(v);
      }
      case 'u': {
        HEARTH_ASSIGN_OR_RETURN(uint32_t v, hex(4, false));
        return single(v);
      }
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(e))) {
      if (e >= '1' && e <= '9' && !in_class) return error("back-references are not supported");
      return error(std::string("unsupported escape \\") + e);
    }
    --pos_;
    return single(next_code_point());  // an escaped punctuation or non-ASCII character
  }

  Result<CharSet> bracket() {
    ++pos_;  // '['
    CharSet s;
    if (!at_end() && peek() == '^') s.negated = true, ++pos_;
    bool first = true;
    while (true) {
      if (at_end()) return error("missing ']'");
      if (peek() == ']' && !first) break;
      if (peek() == '[') return error("nested character classes are not supported");
      if (p_.substr(pos_, 2) == "&&") return error("class intersection && is not supported");
      first = false;
      CharSet item;
      if (peek() == '\\') {
        HEARTH_ASSIGN_OR_RETURN(item, escape(/*in_class=*/true));
      } else {
        item = single(next_code_point());
      }
      const bool is_char = item.properties.empty() && item.ranges.size() == 1;
      if (is_char && pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CharSet hi;
        if (peek() == '\\') {
          HEARTH_ASSIGN_OR_RETURN(hi, escape(/*in_class=*/true));
        } else {
          hi = single(next_code_point());
        }
        if (!hi.properties.empty() || hi.ranges.size() != 1) return error("bad class range");
        const uint32_t lo_cp = item.ranges[0].first, hi_cp = hi.ranges[0].first;
        if (hi_cp < lo_cp) return error("class range out of order");
        s.ranges.emplace_back(lo_cp, hi_cp);
        continue;
      }
      s.ranges.insert(s.ranges.end(), item.ranges.begin(), item.ranges.end());
      s.properties.insert(s.properties.end(), item.properties.begin(), item.properties.end());
    }
    ++pos_;  // ']'
    return s;
  }

  std::string_view p_;
  Program& prog_;
  size_t pos_ = 0;
  bool icase_ = false;
  int depth_ = 0;  // groups open around pos_
};

bool can_be_empty(const Node& n) {
  switch (n.kind) {
    case Node::kSet:
      return false;
    case Node::kConcat:
      for (const Node& k : n.kids) {
        if (!can_be_empty(k)) return false;
      }
      return true;
    case Node::kAlt:
      for (const Node& k : n.kids) {
        if (can_be_empty(k)) return true;
      }
      return false;
    case Node::kRepeat:
      return n.min == 0 || can_be_empty(n.kids[0]);
    case Node::kAtomic:
      return can_be_empty(n.kids[0]);
    default:
      return true;  // empty, assertions
  }
}

class Emitter {
 public:
  explicit Emitter(Program& p) : code_(p.code) {}

  // Repeats copy their bodies ({2,3} of x is x x x?), so nested ones multiply: a bound on the
  // program keeps a hostile pattern from growing it without end. Published patterns compile to
  // a few hundred instructions.
  static constexpr size_t kMaxInstructions = size_t(1) << 16;

  Status emit(const Node& n) {
    if (code_.size() > kMaxInstructions)
      return Status::error("regex: the pattern compiles to more than " +
                           std::to_string(kMaxInstructions) + " instructions");
    switch (n.kind) {
      case Node::kEmpty:
        return Status::ok();
      case Node::kSet:
        add({Op::kSet, n.set});
        return Status::ok();
      case Node::kAnchor:
        add({n.anchor, n.anchor_arg});
        return Status::ok();
      case Node::kConcat:
        for (const Node& k : n.kids) HEARTH_TRY(emit(k));
        return Status::ok();
      case Node::kAlt:
        return alternation(n);
      case Node::kLook:
      case Node::kAtomic:
        return sub_program(n.kind == Node::kLook ? Op::kLookahead : Op::kAtomic, n.anchor_arg,
                           [&] { return emit(n.kids[0]); });
      case Node::kRepeat:
        if (n.possessive) {
          Node greedy = n;
          greedy.possessive = false;
          return sub_program(Op::kAtomic, 0, [&] { return repeat(greedy); });
        }
        return repeat(n);
    }
    return Status::ok();
  }

 private:
  uint32_t here() const { return static_cast<uint32_t>(code_.size()); }
  uint32_t add(Inst i) {
    code_.push_back(i);
    return here() - 1;
  }
  // A split that prefers `first` (the body when greedy) over falling through.
  void patch_split(uint32_t at, uint32_t body, uint32_t skip, bool greedy) {
    code_[at].x = greedy ? body : skip;
    code_[at].y = greedy ? skip : body;
  }

  Status alternation(const Node& n) {
    std::vector<uint32_t> jumps;
    for (size_t i = 0; i < n.kids.size(); ++i) {
      if (i + 1 == n.kids.size()) {
        HEARTH_TRY(emit(n.kids[i]));
        break;
      }
      const uint32_t split = add({Op::kSplit});
      code_[split].x = here();
      HEARTH_TRY(emit(n.kids[i]));
      jumps.push_back(add({Op::kJump}));
      code_[split].y = here();
    }
    for (uint32_t j : jumps) code_[j].x = here();
    return Status::ok();
  }

  Status sub_program(Op op, uint32_t arg, const std::function<Status()>& body) {
    const uint32_t at = add({op, arg});
    code_[at].x = here();
    HEARTH_TRY(body());
    add({Op::kMatch});
    code_[at].y = here();
    return Status::ok();
  }

  Status repeat(const Node& n) {
    const Node& body = n.kids[0];
    for (int i = 0; i < n.min; ++i) HEARTH_TRY(emit(body));
    if (n.max == kUnbounded) {
      if (can_be_empty(body)) return Status::error("regex: a repeated group that can match empty");
      const uint32_t loop = add({Op::kSplit});
      HEARTH_TRY(emit(body));
      add({Op::kJump, 0, loop});
      patch_split(loop, loop + 1, here(), n.greedy);
      return Status::ok();
    }
    std::vector<uint32_t> splits;
    for (int i = n.min; i < n.max; ++i) {
      splits.push_back(add({Op::kSplit}));
      HEARTH_TRY(emit(body));
    }
    for (uint32_t s : splits) patch_split(s, s + 1, here(), n.greedy);
    return Status::ok();
  }

  std::vector<Inst>& code_;
};

}  // namespace

Result<Program> parse_and_compile(std::string_view pattern) {
  Program prog;
  Parser parser(pattern, prog);
  HEARTH_ASSIGN_OR_RETURN(Node root, parser.parse());
  Emitter emitter(prog);
  HEARTH_TRY(emitter.emit(root));
  prog.code.push_back({Op::kMatch});
  return prog;
}

}  // namespace hearth::split_regex
