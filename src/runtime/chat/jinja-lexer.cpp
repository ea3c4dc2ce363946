// Jinja lexer: template text and tags to tokens, applying whitespace control the way Jinja does
// with trim_blocks and lstrip_blocks on. New operators go in kOperators (longest first).
#include <cctype>
#include <cstring>

#include "runtime/chat/jinja-ast.h"

namespace hearth::jinja {

namespace {

// Longest first so "//" wins over "/".
const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|"};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

Status lex_error(int line, const std::string& msg) {
  return Status::error("template line " + std::to_string(line) + ": " + msg);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// A tag boundary remembered for the whitespace pass: which side, and its -/+ modifiers.
struct TagMark {
  size_t token_index;  // index of the begin/end token (or a comment placeholder)
  bool is_block;       // block or comment (trim/lstrip apply); false for {{ }}
  bool minus;          // '-' given
  bool plus;           // '+' given
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Result<std::vector<Token>> run() {
    // keep_trailing_newline=False: Jinja drops one final newline of the source.
    if (!src_.empty() && src_.back() == '\n') {
      src_.remove_suffix(1);
      if (!src_.empty() && src_.back() == '\r') src_.remove_suffix(1);
    }
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      emit_text(pos, open);
      if (open == std::string_view::npos) break;
      const char kind = src_[open + 1];
      size_t p = open + 2;
      bool minus = false, plus = false;
      if (p < src_.size() && src_[p] == '-')
        minus = true, ++p;
      else if (p < src_.size() && src_[p] == '+' && kind != '{')
        plus = true, ++p;
      if (kind == '#') {
        HEARTH_TRY(lex_comment(open, p, minus, plus, pos));
        continue;
      }
      begin_mark(kind == '%' ? TokenKind::BlockBegin : TokenKind::VarBegin, kind == '%', minus,
                 plus);
      HEARTH_ASSIGN_OR_RETURN(pos, lex_tag(p, kind == '%'));
      if (kind == '%') {
        HEARTH_ASSIGN_OR_RETURN(pos, maybe_raw(pos));
      }
    }
    apply_whitespace_control();
    Token end;
    end.kind = TokenKind::End;
    end.line = line_at(src_.size());
    out_.push_back(end);
    return std::move(out_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string_view::npos;
  }

  int line_at(size_t pos) {
    // Incremental: positions only move forward.
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  void emit_text(size_t from, size_t to) {
    if (to == std::string_view::npos) to = src_.size();
    Token t;
    t.kind = TokenKind::Text;
    t.text = std::string(src_.substr(from, to - from));
    t.line = line_at(from);
    // lstrip_blocks looks at the source, not the trimmed text: is the tag preceded, on its
    // line, only by spaces and tabs?
    size_t k = to;
    while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
    text_line_start_.push_back(k == 0 || src_[k - 1] == '\n');
    if (k < from) text_line_start_.back() = false;  // whitespace reaches back into a tag
    out_.push_back(std::move(t));
  }

  // A tag's opening or closing token, with its whitespace-control marks kept aside in `marks`.
  void push_mark(std::vector<TagMark>& marks, TokenKind kind, bool is_block, bool minus,
                 bool plus) {
    Token t;
    t.kind = kind;
    t.line = line_;
    marks.push_back({out_.size(), is_block, minus, plus});
    out_.push_back(t);
  }
  void begin_mark(TokenKind kind, bool is_block, bool minus, bool plus) {
    push_mark(marks_, kind, is_block, minus, plus);
  }
  void end_mark(TokenKind kind, bool is_block, bool minus, bool plus) {
    push_mark(end_marks_, kind, is_block, minus, plus);
  }

  Status lex_comment(size_t open, size_t p, bool minus, bool plus, size_t& pos) {
    const size_t close = src_.find("#}", p);
    if (close == std::string_view::npos) return lex_error(line_at(open), "unclosed comment");
    // A comment is a block-like tag: placeholder tokens carry its marks, removed afterwards.
    begin_mark(TokenKind::End, true, minus, plus);
    const bool end_minus = close > p && src_[close - 1] == '-';
    const bool end_plus = close > p && src_[close - 1] == '+';
    end_mark(TokenKind::End, true, end_minus, end_plus);
    pos = close + 2;
    return Status::ok();
  }

  Result<size_t> lex_tag(size_t p, bool block) {
    int depth = 0;  // bracket balance: "}}" inside {'a': {'b': 1}} does not close the tag
    const int start_line = line_at(p);
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size())
        return lex_error(start_line, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
      if (depth == 0) {
        const char* closer = block ? "%}" : "}}";
        for (int mod = 0; mod < 3; ++mod) {
          size_t q = p;
          if (mod == 1 && src_[q] == '-')
            ++q;
          else if (mod == 2 && block && src_[q] == '+')
            ++q;
          else if (mod != 0)
            continue;
          if (src_.compare(q, 2, closer) == 0) {
            end_mark(block ? TokenKind::BlockEnd : TokenKind::VarEnd, block, mod == 1, mod == 2);
            return q + 2;
          }
        }
      }
      Token t;
      t.line = line_at(p);
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
          ++q;
        t.kind = TokenKind::Name;
        t.text = std::string(src_.substr(p, q - p));
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        HEARTH_ASSIGN_OR_RETURN(p, lex_number(p, t));
      } else if (c == '\'' || c == '"') {
        HEARTH_ASSIGN_OR_RETURN(p, lex_string(p, t));
      } else {
        bool found = false;
        for (const char* op : kOperators) {
          const size_t n = std::strlen(op);
          if (src_.compare(p, n, op) == 0) {
            t.kind = TokenKind::Op;
            t.text = op;
            p += n;
            found = true;
            break;
          }
        }
        if (!found) return lex_error(t.line, std::string("unexpected character '") + c + "'");
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") {
          if (depth == 0) return lex_error(t.line, "unbalanced '" + t.text + "'");
          --depth;
        }
      }
      out_.push_back(std::move(t));
    }
  }

  Result<size_t> lex_number(size_t p, Token& t) {
    size_t q = p;
    std::string digits;
    auto take_digits = [&] {
      while (q < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
        if (src_[q++] != '_') digits += src_[q - 1];
    };
    take_digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      digits += src_[q++];
      take_digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        is_float = true;
        digits += 'e';
        digits += std::string(src_.substr(q + 1, r - q - 1));
        q = r;
        take_digits();
      }
    }
    if (is_float) {
      t.kind = TokenKind::Float;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = TokenKind::Int;
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(digits.c_str(), &end, 10);
      if (errno == ERANGE) return lex_error(t.line, "integer literal " + digits + " is too large");
      t.int_value = v;
    }
    return q;
  }

  Result<size_t> lex_string(size_t p, Token& t) {
    const char quote = src_[p];
    size_t q = p + 1;
    std::string s;
    while (true) {
      if (q >= src_.size()) return lex_error(t.line, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\' || q + 1 >= src_.size()) {
        s += c;
        ++q;
        continue;
      }
      // Python unicode-escape rules, which Jinja applies to string literals.
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        case 'r':
          s += '\r';
          break;
        case '\\':
          s += '\\';
          break;
        case '\'':
          s += '\'';
          break;
        case '"':
          s += '"';
          break;
        case 'a':
          s += '\a';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'v':
          s += '\v';
          break;
        case '0':
          s += '\0';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > src_.size())
            return lex_error(t.line, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[q + k];
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              return lex_error(t.line, "bad \\" + std::string(1, e) + " escape");
            cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                        ? h - '0'
                                        : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) return lex_error(t.line, "escape beyond U+10FFFF");
          append_utf8(s, cp);
          q += n;
          break;
        }
        default:  // unknown escapes keep their backslash, as in Python
          s += '\\';
          s += e;
      }
    }
    t.kind = TokenKind::String;
    t.text = std::move(s);
    return q + 1;
  }

  // {% raw %}...{% endraw %}: the body is text, never interpreted.
  Result<size_t> maybe_raw(size_t pos) {
    const size_t n = out_.size();
    if (n < 3 || out_[n - 3].kind != TokenKind::BlockBegin || out_[n - 2].kind != TokenKind::Name ||
        out_[n - 2].text != "raw")
      return pos;
    for (size_t i = pos; (i = src_.find("{%", i)) != std::string_view::npos; i += 2) {
      size_t q = i + 2;
      const bool minus = q < src_.size() && src_[q] == '-';
      if (minus) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      const bool end_minus = q < src_.size() && src_[q] == '-';
      if (end_minus) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      // Replace `{% raw %}` by nothing and keep the body as text with the same trimming rules.
      const TagMark open = marks_.back(), close = end_marks_.back();
      out_.resize(n - 3);
      marks_.pop_back();
      end_marks_.pop_back();
      begin_mark(TokenKind::End, true, open.minus, open.plus);
      end_mark(TokenKind::End, true, close.minus, close.plus);
      emit_text(pos, i);
      begin_mark(TokenKind::End, true, minus, false);
      end_mark(TokenKind::End, true, end_minus, false);
      return q + 2;
    }
    return lex_error(out_[n - 3].line, "unclosed raw block");
  }

  void apply_whitespace_control() {
    // Map token index -> marks touching it, then edit neighbouring Text tokens.
    std::vector<const TagMark*> begin_at(out_.size(), nullptr), end_at(out_.size(), nullptr);
    for (const auto& m : marks_) begin_at[m.token_index] = &m;
    for (const auto& m : end_marks_) end_at[m.token_index] = &m;
    size_t text_i = 0;
    for (size_t i = 0; i < out_.size(); ++i) {
      if (out_[i].kind != TokenKind::Text) continue;
      const bool line_start = text_line_start_[text_i++];
      std::string& s = out_[i].text;
      const TagMark* next = i + 1 < out_.size() ? begin_at[i + 1] : nullptr;
      const TagMark* prev = i > 0 ? end_at[i - 1] : nullptr;
      if (next) {
        if (next->minus) {
          while (!s.empty() && is_space(s.back())) s.pop_back();
        } else if (next->is_block && !next->plus && line_start) {
          while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
        }
      }
      if (prev) {
        if (prev->minus) {
          size_t k = 0;
          while (k < s.size() && is_space(s[k])) ++k;
          s.erase(0, k);
        } else if (prev->is_block && !prev->plus) {
          if (s.rfind("\r\n", 0) == 0)
            s.erase(0, 2);
          else if (!s.empty() && s[0] == '\n')
            s.erase(0, 1);
        }
      }
    }
    // Drop comment placeholders and empty text.
    std::vector<Token> kept;
    kept.reserve(out_.size());
    for (auto& t : out_) {
      if (t.kind == TokenKind::End) continue;
      if (t.kind == TokenKind::Text && t.text.empty()) continue;
      kept.push_back(std::move(t));
    }
    out_ = std::move(kept);
  }

  std::string_view src_;
  std::vector<Token> out_;
  std::vector<TagMark> marks_, end_marks_;
  std::vector<bool> text_line_start_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

Result<std::vector<Token>> lex_template(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace hearth::jinja
