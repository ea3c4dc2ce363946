// Generated test strings for tokenizer agreement and round-trip tests: words, whitespace runs,
// digits, many scripts, emoji (with ZWJ), control characters and invalid UTF-8. Deterministic.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/utf8.h"

namespace hearth::test {

// `allow_invalid`: also emit bytes that are not valid UTF-8.
inline std::string random_text(std::mt19937_64& rng, bool allow_invalid) {
  static const std::vector<std::string> words = {"the",
                                                 "Hello",
                                                 "world",
                                                 "don't",
                                                 "I'm",
                                                 "WE'LL",
                                                 "you've",
                                                 "it's",
                                                 "They'RE",
                                                 "naïve",
                                                 "Führer",
                                                 "café",
                                                 "über",
                                                 "Привет",
                                                 "мир",
                                                 "こんにちは",
                                                 "世界",
                                                 "中文字符",
                                                 "한국어",
                                                 "مرحبا",
                                                 "שלום",
                                                 "नमस्ते",
                                                 "Ελληνικά",
                                                 "ไทย",
                                                 "<s>",
                                                 "</s>",
                                                 "<unk>",
                                                 "<0x41>",
                                                 "\xE2\x96\x81",
                                                 "e\xCC\x81",
                                                 "$",
                                                 "&&",
                                                 "...",
                                                 "!!",
                                                 "?",
                                                 "(x)",
                                                 "[1]",
                                                 "{}",
                                                 "@home",
                                                 "#tag",
                                                 "a.b",
                                                 "--",
                                                 "http://x.org",
                                                 "🦙",
                                                 "😀",
                                                 "👍🏽",
                                                 "👨‍👩‍👧",
                                                 "🇩🇪",
                                                 "∑",
                                                 "π",
                                                 "½",
                                                 "²",
                                                 "Ⅻ",
                                                 "٣",
                                                 "\xEF\xBF\xBD"};
  std::uniform_int_distribution<int> kind(0, 15);
  std::uniform_int_distribution<int> count(1, 12);
  std::string s;
  const int parts = count(rng);
  for (int i = 0; i < parts; ++i) {
    switch (kind(rng)) {
      case 0:
      case 1:
      case 2:
        s += words[rng() % words.size()];
        break;
      case 3:
        s += std::string(1 + rng() % 4, ' ');
        break;
      case 4: {
        static const char* ws[] = {"\n",     "\t",     "\r\n", "\n\n", " \n ",
                                   "\u00A0", "\u3000", "\v",   "\f"};
        s += ws[rng() % 9];
        break;
      }
      case 5:
        for (int d = 1 + rng() % 7; d > 0; --d) s.push_back(static_cast<char>('0' + rng() % 10));
        break;
      case 6:
        s.push_back(' ');
        s += words[rng() % words.size()];
        break;
      case 7: {  // random code point from a mixed range
        static const uint32_t ranges[][2] = {
            {0x20, 0x7E},       {0xA0, 0x24F},      {0x370, 0x3FF},   {0x400, 0x4FF},
            {0x590, 0x6FF},     {0x900, 0x97F},     {0x3040, 0x30FF}, {0x4E00, 0x9FFF},
            {0xAC00, 0xD7A3},   {0x1F300, 0x1F6FF}, {0x2000, 0x206F}, {0xE000, 0xE0FF},
            {0x10000, 0x1007F}, {0x1D400, 0x1D4FF}};
        const auto& r = ranges[rng() % 14];
        for (int k = 1 + rng() % 3; k > 0; --k) utf8::append(s, r[0] + rng() % (r[1] - r[0] + 1));
        break;
      }
      case 8:  // control characters, NUL included
        s.push_back(static_cast<char>(rng() % 32));
        if (rng() % 4 == 0) s.push_back('\x7F');
        break;
      case 9:
        if (allow_invalid) {
          static const char* bad[] = {"\x80",
                                      "\xFF",
                                      "\xC0\xAF",
                                      "\xE2\x82",
                                      "\xED\xA0\x80",
                                      "\xF0\x9F\x98",
                                      "\xF8\x88\x80\x80\x80",
                                      "\xC3",
                                      "\xFE",
                                      "\xF4\x90\x80\x80"};
          s += bad[rng() % 10];
        } else {
          s += "x";
        }
        break;
      case 10:
        s += "'s";
        break;
      case 11: {
        static const char* punct[] = {"!", ",", ".", ";", "'", "\"", "-", "_", "/", "\\", "%", "*"};
        for (int k = 1 + rng() % 3; k > 0; --k) s += punct[rng() % 12];
        break;
      }
      default:
        s += words[rng() % words.size()];
        s.push_back(' ');
        break;
    }
  }
  return s;
}

}  // namespace hearth::test
