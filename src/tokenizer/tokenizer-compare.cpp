// The comparison loop and its built-in corpus.
#include "tokenizer/tokenizer-compare.h"

namespace hearth {

std::vector<std::string> builtin_tokenizer_corpus() {
  return {
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      " leading space",
      "trailing spaces   ",
      "I'm sure you've seen they'll DON'T WE'RE it's",
      "a  b   c    d\t\te\n\nf\r\ng",
      "\n\n\n",
      "   ",
      "1 12 123 1234 12345 1234567890 3.14159 -42 1e10 0x1F",
      "Prices: $5.99, €12, ¥300, £7",
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
      "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
      "<html><body class=\"x\">&amp;</body></html>",
      "https://example.org/path?q=1&r=two#frag",
      "user@example.com",
      "CamelCaseIdentifier snake_case_identifier kebab-case-identifier",
      "ALL CAPS SENTENCE WITH NUMBERS 2024",
      "Ünïcödé àccents: café naïve façade résumé",
      "e\u0301 (combining acute) vs \u00E9",
      "Привет, мир! Как дела?",
      "Γειά σου Κόσμε",
      "مرحبا بالعالم",
      "שלום עולם",
      "नमस्ते दुनिया",
      "สวัสดีชาวโลก",
      "你好，世界！这是一个测试。",
      "こんにちは世界。カタカナとひらがな。",
      "안녕하세요 세계",
      "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️",
      "math: ∑ ∫ √2 ≤ ≥ ≠ ½ ² Ⅻ",
      "quotes: ‘single’ “double” «guillemets» — dash – en … ellipsis",
      "tabs\tand\tcolumns\t1\t2",
      "\u00A0non-breaking\u2003em-space\u3000ideographic",
      "mixed中文English日本語한국어123",
      "!!!???...,,,;;;:::",
      "'quoted' \"double\" `backtick`",
      "line one\nline two\n\n  indented line three",
      "    four leading spaces (code indent)",
      "A",
      "",
  };
}

std::vector<std::string> corpus_from_text(std::string_view file_text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file_text.size()) {
    const size_t nl = file_text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? file_text.size() : nl;
    if (end > pos) out.emplace_back(file_text.substr(pos, end - pos));
    pos = end + 1;
  }
  out.emplace_back(file_text);
  return out;
}

TokenizerComparison compare_tokenizers(const Tokenizer& candidate, const Tokenizer& reference,
                                       const std::vector<std::string>& corpus, size_t max_report) {
  TokenizerComparison r;
  for (const std::string& text : corpus) {
    ++r.texts;
    bool differs = false;
    for (bool special : {false, true}) {
      auto got = candidate.encode(text, special);
      auto want = reference.encode(text, special);
      if (got == want) continue;
      if (!differs && r.first.size() < max_report) {
        r.first.push_back({text, special, std::move(got), std::move(want)});
      }
      differs = true;
    }
    r.mismatched += differs;
  }
  return r;
}

}  // namespace hearth
