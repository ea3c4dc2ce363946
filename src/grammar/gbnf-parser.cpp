// parse_gbnf (grammar.h): a recursive-descent reader of llama.cpp's GBNF. Newlines end a rule
// except inside parentheses and after `::=` or `|`, as in llama.cpp; a line may also start with
// `|` to continue the rule above.
#include <cstring>

#include "base/printable.h"
#include "grammar/grammar-builder.h"

namespace hearth {
namespace {

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& limits)
      : s_(text), max_nesting_(limits.max_nesting), b_(limits) {}

  Result<Grammar> parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      HEARTH_TRY(parse_rule());
      skip_space(true);
    }
    auto g = b_.finish("root");
    if (!g) return Status::error("grammar: " + g.message());
    return g;
  }

 private:
  Status error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    return Status::error("grammar: line " + std::to_string(line) + " column " +
                         std::to_string(col) + ": " + what);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  Status parse_rule() {
    const std::string name = parse_name();
    if (name.empty()) return error("expected a rule name");
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") return error("expected '::=' after rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const uint32_t id = b_.rule_id(name);
    if (b_.is_defined(id)) return error("rule '" + name + "' is defined twice");
    std::vector<GrammarBuilder::Sequence> alts;
    HEARTH_TRY(parse_alternatives(false, &alts));
    b_.define(id, std::move(alts));
    if (peek() == '\r') ++pos_;
    if (!at_end() && peek() != '\n') return error(std::string("unexpected '") + peek() + "'");
    return Status::ok();
  }

  Status parse_alternatives(bool nested, std::vector<GrammarBuilder::Sequence>* alts) {
    while (true) {
      GrammarBuilder::Sequence seq;
      HEARTH_TRY(parse_sequence(nested, &seq));
      alts->push_back(std::move(seq));
      if (!nested && peek() != '|') {
        // A line that starts with '|' continues the rule (a new rule starts with a name).
        const size_t save = pos_;
        skip_space(true);
        if (peek() != '|') pos_ = save;
      }
      if (peek() != '|') return Status::ok();
      ++pos_;
      skip_space(true);
    }
  }

  Status parse_sequence(bool nested, GrammarBuilder::Sequence* seq) {
    size_t last_start = SIZE_MAX;  // where the last symbol began in seq (repetitions apply to it)
    while (!at_end()) {
      const char c = peek();
      const size_t start = seq->size();
      if (c == '"') {
        ++pos_;
        std::vector<uint8_t> bytes;
        while (peek() != '"') {
          if (at_end()) return error("unterminated string literal");
          uint32_t cp;
          HEARTH_TRY(parse_char(&cp));
          if (cp >= 0xD800 && cp <= 0xDFFF) return error("a surrogate is not a character");
          append_utf8(cp, &bytes);
        }
        ++pos_;
        b_.append_literal(bytes, seq);
      } else if (c == '[') {
        HEARTH_TRY(parse_class(seq));
      } else if (c == '.') {
        ++pos_;
        if (Status st = b_.append_class(normalize_ranges({}, true), seq); !st)
          return error(st.message());
      } else if (c == '(') {
        if (depth_ >= max_nesting_)
          return error("groups nested deeper than " + std::to_string(max_nesting_));
        ++pos_;
        skip_space(true);
        std::vector<GrammarBuilder::Sequence> alts;
        ++depth_;
        const Status inner = parse_alternatives(true, &alts);
        --depth_;
        HEARTH_TRY(inner);
        if (peek() != ')') return error("expected ')'");
        ++pos_;
        seq->push_back(b_.group(std::move(alts)));
      } else if (is_name_char(c)) {
        const std::string name = parse_name();
        seq->push_back({true, b_.rule_id(name)});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last_start == SIZE_MAX) return error(std::string("'") + c + "' follows nothing");
        uint32_t min = 0, max = GrammarBuilder::kUnbounded;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        ++pos_;
        if (c == '{') HEARTH_TRY(parse_braces(&min, &max));
        if (Status st = b_.apply_repetition(seq, last_start, min, max); !st)
          return error(st.message());
        last_start = SIZE_MAX;  // x** is not meaningful
        skip_space(nested);
        continue;
      } else {
        break;
      }
      last_start = start;
      skip_space(nested);
    }
    return Status::ok();
  }

  Status parse_braces(uint32_t* min, uint32_t* max) {
    skip_space(true);
    uint64_t a;
    if (!parse_int(&a)) return error("expected a number after '{'");
    *min = uint32_t(std::min<uint64_t>(a, UINT32_MAX - 1));
    skip_space(true);
    if (peek() == '}') {
      *max = *min;
    } else {
      if (peek() != ',') return error("expected ',' or '}' in a repetition");
      ++pos_;
      skip_space(true);
      uint64_t b;
      if (parse_int(&b)) *max = uint32_t(std::min<uint64_t>(b, UINT32_MAX - 1));
      skip_space(true);
      if (peek() != '}') return error("expected '}' to end a repetition");
    }
    ++pos_;
    return Status::ok();
  }

  bool parse_int(uint64_t* v) {
    const size_t start = pos_;
    *v = 0;
    while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (*v < (uint64_t(1) << 40)) *v = *v * 10 + uint64_t(s_[pos_] - '0');
      ++pos_;
    }
    return pos_ > start;
  }

  Status parse_class(GrammarBuilder::Sequence* seq) {
    ++pos_;  // '['
    bool negate = false;
    if (peek() == '^') negate = true, ++pos_;
    std::vector<CodepointRange> ranges;
    while (peek() != ']') {
      if (at_end()) return error("unterminated character class");
      uint32_t lo, hi;
      HEARTH_TRY(parse_char(&lo));
      hi = lo;
      if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        HEARTH_TRY(parse_char(&hi));
        if (hi < lo) return error("character range with its end before its start");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (Status st = b_.append_class(normalize_ranges(std::move(ranges), negate), seq); !st)
      return error(st.message());
    return Status::ok();
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  Status parse_char(uint32_t* cp) {
    const unsigned char c = uint8_t(s_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= s_.size()) return error("'\\' at the end of the grammar");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'x':
          return parse_hex(2, cp);
        case 'u':
          return parse_hex(4, cp);
        case 'U':
          return parse_hex(8, cp);
        case 't':
          *cp = '\t';
          return Status::ok();
        case 'n':
          *cp = '\n';
          return Status::ok();
        case 'r':
          *cp = '\r';
          return Status::ok();
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          *cp = uint8_t(e);
          return Status::ok();
        default:
          --pos_;
          return error(std::string("unknown escape '\\") + e + "'");
      }
    }
    if (!decode_utf8(s_, &pos_, cp)) return error("invalid UTF-8 in the grammar");
    return Status::ok();
  }

  Status parse_hex(int digits, uint32_t* cp) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) return error("expected " + std::to_string(digits) + " hex digits in an escape");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > 0x10FFFF) return error("escape beyond U+10FFFF");
    *cp = v;
    return Status::ok();
  }

  std::string_view s_;
  uint32_t max_nesting_;  // GrammarLimits::max_nesting (the builder keeps the rest)
  size_t pos_ = 0;
  uint32_t depth_ = 0;  // ( ) groups open around pos_
  GrammarBuilder b_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, const GrammarLimits& limits) {
  auto g = GbnfParser(text, limits).parse();
  // Errors quote the grammar (an escape, a rule name): one line, whatever it holds.
  if (!g.is_ok()) return Status::error(printable(g.message()));
  return g;
}

}  // namespace hearth
