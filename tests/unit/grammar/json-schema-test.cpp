// JSON Schema -> grammar: numeric ranges checked exhaustively against arithmetic, patterns
// against std::regex, formats, object/array layouts, and every refusal naming its keyword.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <regex>

#include "grammar-test-util.h"
#include "grammar/json-schema.h"

namespace hearth {
namespace {

using test::grammar_matches;

std::shared_ptr<const Grammar> from_schema(const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.is_ok()) << schema << ": " << gbnf.message();
  if (!gbnf) return nullptr;
  auto g = parse_gbnf(gbnf.value());
  EXPECT_TRUE(g.is_ok()) << g.message() << "\n" << gbnf.value();
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(g.value()));
}

std::string bound_json(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  std::mt19937 rng(3);
  for (int round = 0; round < 60; ++round) {
    const int64_t lo = int64_t(rng() % 2001) - 1000,
                  hi = lo + int64_t(rng() % (round < 30 ? 40 : 3000));
    const bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    const int shape = int(rng() % 4);  // both bounds, only min, only max, both again
    std::string schema = "{\"type\":\"integer\"";
    if (shape != 2)
      schema += std::string(",\"") + (lo_ex ? "exclusiveMinimum" : "minimum") +
                "\":" + std::to_string(lo);
    if (shape != 1)
      schema += std::string(",\"") + (hi_ex ? "exclusiveMaximum" : "maximum") +
                "\":" + std::to_string(hi);
    schema += "}";
    if ((shape == 0 || shape == 3) && (lo_ex || hi_ex) && hi - lo < 2)
      continue;  // may be empty: tested below
    auto g = from_schema(schema);
    ASSERT_TRUE(g);
    for (int64_t n = lo - 60; n <= hi + 60; ++n) {
      bool want = true;
      if (shape != 2) want = want && (lo_ex ? n > lo : n >= lo);
      if (shape != 1) want = want && (hi_ex ? n < hi : n <= hi);
      ASSERT_EQ(grammar_matches(g, std::to_string(n)), want) << schema << " n=" << n;
    }
    EXPECT_FALSE(grammar_matches(g, "-0"));
    EXPECT_FALSE(grammar_matches(g, "0" + std::to_string(std::abs(lo) + 1)));
  }
  auto g = from_schema(R"({"type":"integer","minimum":-5,"maximum":123456789012})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_matches(g, "123456789012"));
  EXPECT_TRUE(grammar_matches(g, "99999999999"));
  EXPECT_FALSE(grammar_matches(g, "123456789013"));
  EXPECT_FALSE(grammar_matches(g, "1.5"));
  EXPECT_FALSE(
      json_schema_to_gbnf(R"({"type":"integer","minimum":3,"exclusiveMaximum":3})").is_ok());
}

TEST(JsonSchema, NumberBoundsNeverAdmitAValueOutside) {
  std::mt19937 rng(4);
  for (int round = 0; round < 40; ++round) {
    const double lo = (int(rng() % 400) - 200) / 8.0, hi = lo + 1.0 + (rng() % 200) / 8.0;
    const bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    const std::string schema = std::string("{\"type\":\"number\",\"") +
                               (lo_ex ? "exclusiveMinimum" : "minimum") + "\":" + bound_json(lo) +
                               ",\"" + (hi_ex ? "exclusiveMaximum" : "maximum") +
                               "\":" + bound_json(hi) + "}";
    auto g = from_schema(schema);
    ASSERT_TRUE(g);
    int matched = 0;
    for (int k = 0; k < 3000; ++k) {
      // Decimals around the range, with 0-7 fraction digits.
      const double whole = std::floor(lo) - 3 + double(rng() % uint32_t(hi - lo + 7));
      const int digits = int(rng() % 8);
      std::string text = std::to_string(int64_t(std::fabs(whole)));
      if (digits) {
        text += ".";
        for (int d = 0; d < digits; ++d) text += char('0' + rng() % 10);
      }
      if (whole < 0 || (whole == 0 && rng() % 2)) text = "-" + text;
      const double v = std::stod(text);
      const bool inside = (lo_ex ? v > lo : v >= lo) && (hi_ex ? v < hi : v <= hi);
      const bool m = grammar_matches(g, text);
      if (m) ASSERT_TRUE(inside) << schema << " admitted " << text;
      matched += m;
    }
    EXPECT_GT(matched, 100) << schema;
    // Every integer inside is admitted.
    for (int64_t n = int64_t(std::floor(lo)) - 1; n <= int64_t(std::ceil(hi)) + 1; ++n) {
      const bool inside = (lo_ex ? n > lo : n >= lo) && (hi_ex ? n < hi : n <= hi);
      EXPECT_EQ(grammar_matches(g, std::to_string(n)), inside) << schema << " " << n;
    }
  }
  EXPECT_FALSE(json_schema_to_gbnf(R"({"type":"number","minimum":0.2,"maximum":0.3})").is_ok());
  auto any = from_schema(R"({"type":"number"})");
  ASSERT_TRUE(any);
  for (const char* ok : {"0", "-1.5", "3e10", "2.5E-3"})
    EXPECT_TRUE(grammar_matches(any, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e"})
    EXPECT_FALSE(grammar_matches(any, bad)) << bad;
}

// The canonical JSON encoding the grammar produces: raw characters, \" \\ and \u00XX escapes.
std::string json_encode(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// A pattern as a JSON string literal.
std::string nlohmann_escape(const std::string& p) {
  std::string out = "\"";
  for (char c : p) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

TEST(JsonSchema, PatternsAgreeWithStdRegex) {
  const std::vector<std::string> patterns = {
      "^[A-Z][a-z]{1,4}$", "^(ab|c)+$", "^a.c$", "b", "^\\d{2,3}-\\w+$", "^[^a-c]*$", "^x?y*z+$",
      "^(?:q|r)(s|t){2}$", "^\"\\\\[a\\-z]$", "^\\s\\S$", "a$", "^[\\d.]+$", "^\\x41\\u0042{1,}$",
      "^[a-c\\n]{2}$", "^(a|)b$", "^a{2,}?$",
      // groups as deep as the parser takes (64)
      "^" + std::string(64, '(') + "ab|c" + std::string(64, ')') + "$"};
  std::mt19937 rng(5);
  const std::string alphabet = "abcqrstxyzAB09.-\"\\ \n_";
  for (const auto& p : patterns) {
    auto g = from_schema(R"({"type":"string","pattern":)" + nlohmann_escape(p) + "}");
    ASSERT_TRUE(g) << p;
    const std::regex re(p, std::regex::ECMAScript);
    int yes = 0;
    for (int k = 0; k < 3000; ++k) {
      std::string s(rng() % 6, ' ');
      for (char& c : s) c = alphabet[rng() % alphabet.size()];
      static const char* kProbes[] = {"Abcd", "12-ab", "abc", "\"\\a", "\"\\-", "AB",
                                      "ABB",  "aa",    "aaa", "a",     "qst",   "b"};
      if (k < 12) s = kProbes[k];
      const bool want = std::regex_search(s, re);
      ASSERT_EQ(grammar_matches(g, json_encode(s)), want) << p << " on '" << s << "'";
      yes += want;
    }
    EXPECT_GT(yes, 0) << p;
  }
}

TEST(JsonSchema, FormatsMatchTheirRfcShape) {
  struct F {
    const char* format;
    std::vector<const char*> ok, bad;
  };
  const std::vector<F> cases = {
      {"date",
       {"2024-02-28", "1999-12-31", "2023-04-30"},
       {"2024-02-30", "2023-04-31", "2024-13-01", "24-01-01"}},
      {"time", {"23:59:59Z", "08:30:00.123+05:30"}, {"24:00:00Z", "12:60:00Z", "12:00:00"}},
      {"date-time", {"2024-01-31T10:00:00-03:00"}, {"2024-01-31 10:00:00Z"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
  };
  for (const auto& f : cases) {
    auto g = from_schema(std::string(R"({"type":"string","format":")") + f.format + "\"}");
    ASSERT_TRUE(g);
    for (const char* s : f.ok)
      EXPECT_TRUE(grammar_matches(g, json_encode(s))) << f.format << " " << s;
    for (const char* s : f.bad)
      EXPECT_FALSE(grammar_matches(g, json_encode(s))) << f.format << " " << s;
  }
}

TEST(JsonSchema, ObjectsAndArraysLayout) {
  auto obj = from_schema(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string","maxLength":3},"c":{"type":"boolean"}},"required":["a","c"]})");
  ASSERT_TRUE(obj);
  for (const char* ok : {R"({"a":1,"c":true})", R"({"a":1,"b":"xy","c":false})",
                         "{ \"a\": 1, \"c\": true }", "{\n  \"a\": 1,\n  \"c\": true\n}"})
    EXPECT_TRUE(grammar_matches(obj, ok)) << ok;
  for (const char* bad :
       {"{}", R"({"a":1})", R"({"c":true,"a":1})", R"({"a":1,"b":"long","c":true})",
        R"({"a":1,"c":true,"d":1})", R"({"a":1,"c":true,})"})
    EXPECT_FALSE(grammar_matches(obj, bad)) << bad;

  auto extra = from_schema(R"({"type":"object","properties":{"id":{"type":"integer"}},
      "additionalProperties":{"type":"string","maxLength":2}})");
  ASSERT_TRUE(extra);
  for (const char* ok : {"{}", R"({"id":1})", R"({"x":"a"})", R"({"id":1,"i":"a","idx":""})"})
    EXPECT_TRUE(grammar_matches(extra, ok)) << ok;
  for (const char* bad : {R"({"id":1,"id":"a"})", R"({"x":1})", R"({"id":"a"})"})
    EXPECT_FALSE(grammar_matches(extra, bad)) << bad;

  auto optional_only = from_schema(R"({"properties":{"a":{"const":1},"b":{"const":2}}})");
  ASSERT_TRUE(optional_only);
  for (const char* ok : {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"})
    EXPECT_TRUE(grammar_matches(optional_only, ok)) << ok;
  EXPECT_FALSE(grammar_matches(optional_only, R"({,"b":2})"));

  auto arr = from_schema(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},
      "minItems":1,"maxItems":3})");
  ASSERT_TRUE(arr);
  for (const char* ok : {"[1]", "[1,2,3]", "[ 1 , 2 ]"})
    EXPECT_TRUE(grammar_matches(arr, ok)) << ok;
  for (const char* bad : {"[]", "[1,2,3,4]", "[10]", "[1,]"})
    EXPECT_FALSE(grammar_matches(arr, bad)) << bad;

  auto tuple = from_schema(R"({"prefixItems":[{"type":"string","maxLength":1},{"type":"null"}],
      "items":false})");
  ASSERT_TRUE(tuple);
  for (const char* ok : {"[]", R"(["a"])", R"(["a",null])"})
    EXPECT_TRUE(grammar_matches(tuple, ok)) << ok;
  for (const char* bad : {"[null]", R"(["a",null,1])"})
    EXPECT_FALSE(grammar_matches(tuple, bad)) << bad;

  auto tree = from_schema(R"({"$ref":"#/$defs/t","$defs":{"t":{"type":"object",
      "properties":{"k":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},
      "required":["k"],"additionalProperties":false}}})");
  ASSERT_TRUE(tree);
  EXPECT_TRUE(grammar_matches(tree, R"({"k":[{"k":[]},{"k":[{"k":[]}]}]})"));
  EXPECT_FALSE(grammar_matches(tree, R"({"k":[{}]})"));

  auto merged = from_schema(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},
      "required":["a"]},{"properties":{"b":{"type":"boolean"}},"required":["b"]}]})");
  ASSERT_TRUE(merged);
  EXPECT_TRUE(grammar_matches(merged, R"({"a":1,"b":true})"));
  EXPECT_FALSE(grammar_matches(merged, R"({"a":1})"));

  auto one = from_schema(R"({"oneOf":[{"type":"string","maxLength":2},{"type":"integer"}]})");
  ASSERT_TRUE(one);
  EXPECT_TRUE(grammar_matches(one, "\"ab\""));
  EXPECT_TRUE(grammar_matches(one, "12"));

  auto en = from_schema(R"({"enum":["a\"b",3,null,{"x":[1]}]})");
  ASSERT_TRUE(en);
  for (const char* ok : {R"("a\"b")", "3", "null", R"({"x":[1]})"})
    EXPECT_TRUE(grammar_matches(en, ok)) << ok;
  EXPECT_FALSE(grammar_matches(en, "\"a\""));
  // Floats with no fraction count as integers, however large (casting 4.5e46 to int64_t to
  // ask was undefined behaviour); 2.5 does not.
  auto big = from_schema(R"({"type":"integer","enum":[4.5e46,2.5,7]})");
  ASSERT_TRUE(big);
  EXPECT_TRUE(grammar_matches(big, "4.5e+46"));
  EXPECT_TRUE(grammar_matches(big, "7"));
  EXPECT_FALSE(grammar_matches(big, "2.5"));

  auto any_obj = from_schema(R"({"type":"object"})");
  ASSERT_TRUE(any_obj);
  EXPECT_TRUE(grammar_matches(any_obj, R"({"x":[1,{"y":null}]})"));
  EXPECT_FALSE(grammar_matches(any_obj, "[]"));

  auto obj_any = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(obj_any.is_ok()) << obj_any.message();
  auto any = std::make_shared<const Grammar>(std::move(obj_any.value()));
  EXPECT_TRUE(grammar_matches(any, R"({"a":[1,{"b":null}],"c":"\u00e9"})"));
  EXPECT_FALSE(grammar_matches(any, "[1]"));
  EXPECT_FALSE(grammar_matches(any, "\"x\""));
}

TEST(JsonSchema, RefusalsNameTheKeyword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"integer","multipleOf":3})", "unsupported keyword 'multipleOf' at #"},
      {R"({"properties":{"a":{"not":{}}}})", "unsupported keyword 'not' at #/properties/a"},
      {R"({"type":"object","minProperties":1})", "unsupported keyword 'minProperties'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems' (only false)"},
      {R"({"type":"string","format":"email"})", "unsupported string format 'email'"},
      {R"({"$ref":"https://example.com/s.json"})", "not a local reference"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
      {R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}})", "'type' next to '$ref'"},
      {R"({"type":"strin"})", "unknown type \"strin\" at #/type"},
      {R"({"type":"string","minLength":5,"maxLength":2})", "maxLength is below minLength"},
      {R"({"type":"string","minLength":-1})", "must be a non-negative integer at #/minLength"},
      {R"({"type":"string","pattern":"^(?=a)b$"})", "lookaround"},
      {R"({"type":"string","pattern":"^(a)\\1$"})", "unsupported escape '\\1'"},
      {R"({"type":"string","pattern":"^[a-$"})", "missing ']'"},
      {R"({"type":"string","pattern":"^[a-z]{4,3}$"})",
       "repetition {4,3} has its maximum below its minimum"},
      // A client's pattern nested past the pattern parser's bound (its recursion: 200,000
      // groups overflowed the server's stack).
      {R"({"type":"string","pattern":")" + std::string(200000, '(') + "a" +
           std::string(200000, ')') + R"("})",
       "groups nested deeper than 64"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})",
       "oneOf branches overlap"},
      {R"({"oneOf":[{"minimum":1},{"maximum":3}]})", "must differ in type"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "'type' in two branches"},
      {R"({"properties":{"a":false}})", "'false' matches nothing at #/properties/a"},
      {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "minItems needs more"},
      {R"({"enum":[]})", "'enum' must be a non-empty array"},
      {R"({"type":"number","minimum":"1"})", "must be a number at #/minimum"},
      {"[1,2]", "a schema must be an object or a boolean"},
      {[] {  // a schema file nested past the converter's bound (its recursion)
         std::string deep;
         for (int i = 0; i < 5000; ++i) deep += R"({"type":"array","items":)";
         return deep + "true" + std::string(5000, '}');
       }(),
       "the schema nests deeper than 100 levels"},
      // References that are not JSON pointers, inside oneOf and allOf (followed there first).
      {R"({"oneOf":[{"$ref":"number"},{"type":"string"}]})",
       "names no schema here (#/... pointer) at #/oneOf/0"},
      {R"({"oneOf":[{"type":"string"},{"$ref":"#number"}]})",
       "names no schema here (#/... pointer) at #/oneOf/1"},
      {R"({"allOf":[{"$ref":"#x~2/0"},{"type":"string"}]})",
       "names no schema here (#/... pointer) at #/allOf"},
      {"{\"type\":", "not valid JSON"},
  };
  for (const auto& [schema, want] : cases) {
    auto g = json_schema_to_gbnf(schema);
    ASSERT_FALSE(g.is_ok()) << schema;
    EXPECT_NE(g.message().find(want), std::string::npos) << schema << " -> " << g.message();
    EXPECT_EQ(g.message().rfind("JSON Schema: ", 0), 0u) << g.message();
  }
}

}  // namespace
}  // namespace hearth
