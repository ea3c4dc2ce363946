// JSON strings as GBNF (json-schema-parts.h): literals, characters by code point, formats.
// Generated classes spell every code point as \UXXXXXXXX, so no character needs GBNF escaping.
#include <cstdio>

#include "grammar/json-schema-parts.h"

namespace hearth::schema {
namespace {

std::string hex_escape(const char* fmt, uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    const uint8_t c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += hex_escape("\\x%02X", c);
    } else {
      out += ch;  // printable ASCII, or UTF-8 (the parser reads it as code points)
    }
  }
  return out + "\"";
}

std::string json_char(const std::vector<CodepointRange>& ranges) {
  std::vector<std::string> alts;
  std::string cls;
  for (const auto& [lo, hi] : ranges) {
    // Raw characters: everything but controls, '"' and '\', which JSON requires escaped.
    static constexpr CodepointRange kRaw[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
    for (const auto& raw : kRaw) {
      const uint32_t a = std::max(lo, raw.first), b = std::min(hi, raw.second);
      if (a > b) continue;
      cls += hex_escape("\\U%08X", a);
      if (b > a) cls += "-" + hex_escape("\\U%08X", b);
    }
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x5C); ++c) {
      if (c == '"')
        alts.push_back("\"\\\\\\\"\"");
      else if (c == '\\')
        alts.push_back("\"\\\\\\\\\"");
      else if (c < 0x20)
        alts.push_back(hex_escape("\"\\\\u%04x\"", c));
    }
  }
  if (!cls.empty()) alts.insert(alts.begin(), "[" + cls + "]");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string json_any_char() {
  // \u escapes of surrogates are left out: a lone one is not a character.
  return "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] "
         "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))";
}

Result<std::string> string_format(const std::string& format) {
  // RFC 3339 full-date with the day range of each month (29 February is left out rather than
  // checking leap years), full-time with seconds 00-59 and a required offset.
  const std::string date =
      "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) "
      "| (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") "
      "| \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))";
  const std::string time =
      "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
      "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
  const std::string hex = "[0-9a-f]";
  std::string body;
  if (format == "date")
    body = date;
  else if (format == "time")
    body = time;
  else if (format == "date-time")
    body = date + " \"T\" " + time;
  else if (format == "uuid")
    body = hex + "{8} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex +
           "{12}";
  else
    return Status::error("unsupported string format '" + format +
                         "' (supported: date, time, date-time, uuid)");
  return "\"\\\"\" " + body + " \"\\\"\"";
}

}  // namespace hearth::schema
