// ECMAScript `pattern` -> GBNF over a JSON string's encoded characters (json-schema-parts.h).
// Subset: literals, escapes (\d \w \s \D \W \S, \t \n \r \f \v \0, \xHH, \uHHHH, escaped
// punctuation), classes with ranges and negation, `.`, groups ( ) and (?: ), `|`, quantifiers
// * + ? {n} {n,} {n,m} (lazy forms too: for a whole-string match they accept the same strings),
// `^` at the start and `$` at the end. A pattern without them matches anywhere in the string, as
// JSON Schema says. Backreferences, lookaround, \b and named groups are refused.
#include "base/printable.h"
#include "grammar/json-schema-parts.h"

namespace hearth::schema {
namespace {

const std::vector<CodepointRange> kDigit = {{'0', '9'}};
const std::vector<CodepointRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpace = {
    {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodepointRange> kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class PatternParser {
  static constexpr int kMaxGroupDepth = 64;

 public:
  explicit PatternParser(const std::string& p) : p_(p) {}

  Result<std::string> parse() {
    std::string body = p_;
    const bool anchored_start = !body.empty() && body[0] == '^';
    if (anchored_start) body.erase(0, 1);
    bool anchored_end = false;
    if (!body.empty() && body.back() == '$') {
      size_t slashes = 0;
      for (size_t i = body.size() - 1; i > 0 && body[i - 1] == '\\'; --i) ++slashes;
      if (slashes % 2 == 0) anchored_end = true, body.pop_back();
    }
    p_ = body;
    HEARTH_ASSIGN_OR_RETURN(std::string expr, parse_alternatives());
    if (i_ < p_.size()) return error(std::string("unexpected '") + p_[i_] + "'");
    const std::string any = json_any_char() + "*";
    if (!anchored_start) expr = any + " " + expr;
    if (!anchored_end) expr += " " + any;
    return expr;
  }

 private:
  // The pattern quoted short, so the reason after it survives the message's length cap.
  Status error(const std::string& what) const {
    return Status::error("pattern '" + printable(p_, 80) + "': " + what);
  }
  bool more() const { return i_ < p_.size(); }

  Result<std::string> parse_alternatives() {
    std::vector<std::string> alts;
    while (true) {
      HEARTH_ASSIGN_OR_RETURN(std::string seq, parse_sequence());
      alts.push_back(seq.empty() ? "\"\"" : seq);
      if (!more() || p_[i_] != '|') break;
      ++i_;
    }
    if (alts.size() == 1) return "(" + alts[0] + ")";
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return out + ")";
  }

  Result<std::string> parse_sequence() {
    std::string out;
    while (more() && p_[i_] != '|' && p_[i_] != ')') {
      HEARTH_ASSIGN_OR_RETURN(std::string atom, parse_atom());
      HEARTH_ASSIGN_OR_RETURN(std::string quantified, parse_quantifier(atom));
      out += (out.empty() ? "" : " ") + quantified;
    }
    return out;
  }

  Result<std::string> parse_atom() {
    const char c = p_[i_];
    if (c == '(') {
      // Groups recurse (atom -> alternatives -> sequence -> atom), and a client sends the
      // pattern: a bound keeps a hostile one from overflowing the server's stack (200,000 '('
      // did). Real patterns nest a few groups deep.
      if (depth_ >= kMaxGroupDepth)
        return error("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      ++i_;
      if (p_.compare(i_, 2, "?:") == 0) {
        i_ += 2;
      } else if (more() && p_[i_] == '?') {
        return error("lookaround and named groups are not supported");
      }
      ++depth_;
      auto inner = parse_alternatives();
      --depth_;
      if (!inner.is_ok()) return inner;
      if (!more() || p_[i_] != ')') return error("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return json_char(normalize_ranges(kLineTerminators, true));
    }
    if (c == '^' || c == '$') return error("'^' and '$' are supported only at the ends");
    if (c == '*' || c == '+' || c == '?') return error(std::string("'") + c + "' follows nothing");
    if (c == '\\') {
      std::vector<CodepointRange> ranges;
      HEARTH_TRY(parse_escape(false, &ranges));
      return json_char(ranges);
    }
    uint32_t cp = 0;
    HEARTH_TRY(read_codepoint(&cp));
    return json_char({{cp, cp}});
  }

  Result<std::string> parse_quantifier(const std::string& atom) {
    if (!more()) return atom;
    const char c = p_[i_];
    std::string op;
    if (c == '*' || c == '+' || c == '?') {
      op = std::string(1, c);
      ++i_;
    } else if (c == '{') {
      size_t j = i_ + 1;
      auto number = [&](uint64_t* v) {
        const size_t s = j;
        *v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && *v < 100000)
          *v = *v * 10 + uint64_t(p_[j++] - '0');
        return j > s;
      };
      uint64_t lo = 0, hi = 0;
      if (!number(&lo)) return atom;  // not a quantifier: a literal '{' follows
      op = "{" + std::to_string(lo);
      if (j < p_.size() && p_[j] == ',') {
        ++j;
        op += ",";
        if (number(&hi)) {
          if (hi < lo && j < p_.size() && p_[j] == '}')
            return error("repetition {" + std::to_string(lo) + "," + std::to_string(hi) +
                         "} has its maximum below its minimum");
          op += std::to_string(hi);
        }
      }
      if (j >= p_.size() || p_[j] != '}') return atom;
      op += "}";
      i_ = j + 1;
    } else {
      return atom;
    }
    if (more() && p_[i_] == '?') ++i_;  // lazy: the same whole-string language
    return "(" + atom + ")" + op;
  }

  Result<std::string> parse_class() {
    ++i_;  // '['
    bool negate = false;
    if (more() && p_[i_] == '^') negate = true, ++i_;
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (more() && (p_[i_] != ']' || first)) {
      first = false;
      std::vector<CodepointRange> item;
      HEARTH_TRY(class_atom(&item));
      if (item.size() == 1 && item[0].first == item[0].second && i_ + 1 < p_.size() &&
          p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        std::vector<CodepointRange> end;
        HEARTH_TRY(class_atom(&end));
        if (end.size() != 1 || end[0].first != end[0].second || end[0].first < item[0].first)
          return error("bad range in a character class");
        item[0].second = end[0].first;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    if (!more()) return error("missing ']'");
    ++i_;
    const auto set = normalize_ranges(std::move(ranges), negate);
    if (set.empty()) return error("a character class matches nothing");
    return json_char(set);
  }

  Status class_atom(std::vector<CodepointRange>* out) {
    if (p_[i_] == '\\') return parse_escape(true, out);
    uint32_t cp = 0;
    HEARTH_TRY(read_codepoint(&cp));
    out->push_back({cp, cp});
    return Status::ok();
  }

  Status parse_escape(bool in_class, std::vector<CodepointRange>* out) {
    if (i_ + 1 >= p_.size()) return error("'\\' at the end");
    const char e = p_[i_ + 1];
    i_ += 2;
    auto add = [&](const std::vector<CodepointRange>& r, bool negated) {
      const auto n = normalize_ranges(r, negated);
      out->insert(out->end(), n.begin(), n.end());
      return Status::ok();
    };
    auto one = [&](uint32_t cp) {
      out->push_back({cp, cp});
      return Status::ok();
    };
    switch (e) {
      case 'd':
        return add(kDigit, false);
      case 'D':
        return add(kDigit, true);
      case 'w':
        return add(kWord, false);
      case 'W':
        return add(kWord, true);
      case 's':
        return add(kSpace, false);
      case 'S':
        return add(kSpace, true);
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return error("'\\b' (word boundary) is not supported");
      case 'x':
      case 'u': {
        const size_t n = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k, ++i_) {
          const char h = i_ < p_.size() ? p_[i_] : '\0';
          const int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (d < 0) return error(std::string("bad \\") + e + " escape");
          v = v * 16 + uint32_t(d);
        }
        if (v >= 0xD800 && v <= 0xDFFF) return error("surrogate escapes are not supported");
        return one(v);
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return error(std::string("unsupported escape '\\") + e + "'");
        --i_;  // an escaped punctuation character stands for itself (maybe UTF-8)
        {
          uint32_t cp = 0;
          HEARTH_TRY(read_codepoint(&cp));
          return one(cp);
        }
    }
  }

  Status read_codepoint(uint32_t* cp) {
    if (!decode_utf8(p_, &i_, cp)) return error("invalid UTF-8");
    return Status::ok();
  }

  std::string p_;
  size_t i_ = 0;
  int depth_ = 0;  // ( ) groups open around i_
};

}  // namespace

Result<std::string> pattern_to_gbnf(const std::string& pattern) {
  return PatternParser(pattern).parse();
}

}  // namespace hearth::schema
