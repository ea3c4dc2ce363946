// kjv-13m (a model trained on the King James Bible, which knows nothing of JSON) generating
// under 50 seeded random JSON Schemas, sampled at temperature 0.8 and greedy: every output must
// be complete JSON that the test's own validator accepts, within the token budget given.
#include <gtest/gtest.h>

#include <random>

#include "runtime/session.h"
#include "runtime/structured-output.h"
#include "schema-validator.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::ordered_json;

// Seeded random schemas: nested objects (required and optional properties), arrays with item
// bounds and tuples, bounded strings, patterns, integer and number bounds, enums, const, anyOf,
// $ref into $defs (one of them recursive).
class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint32_t seed) : rng_(seed) {}

  ordered_json schema() {
    ordered_json s = node(0);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  int pick(int n) { return int(rng_() % uint32_t(n)); }

  ordered_json node(int depth) {
    const int kind = depth >= 3 ? 4 + pick(8) : pick(13);
    switch (kind) {
      case 0:
      case 1:
        return object(depth);
      case 2:
        return array(depth);
      case 3:
        return anyof(depth);
      case 4:
        return bounded_string();
      case 5:
        return pattern_string();
      case 6:
        return integer();
      case 7:
        return number();
      case 8:
        return enumeration();
      case 9:
        return pick(2) ? ordered_json{{"type", "boolean"}} : ordered_json{{"type", "null"}};
      case 10:
        return ordered_json{{"const", pick(2) ? ordered_json("psalm") : ordered_json(40)}};
      case 11:
        return ref(depth);
      default:
        return depth < 3 ? ref(depth) : integer();
    }
  }

  ordered_json object(int depth) {
    static const char* kNames[] = {"name", "book", "verse", "count", "tags", "kind", "ok", "id"};
    ordered_json props = ordered_json::object();
    ordered_json required = ordered_json::array();
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) {
      const std::string name = kNames[pick(8)];
      if (props.contains(name)) continue;
      props[name] = node(depth + 1);
      if (pick(3)) required.push_back(name);
    }
    ordered_json s = {{"type", "object"}, {"properties", props}};
    if (!required.empty()) s["required"] = required;
    if (pick(2)) s["additionalProperties"] = false;
    return s;
  }

  ordered_json array(int depth) {
    const int min = pick(3);
    ordered_json s = {{"type", "array"}, {"minItems", min}, {"maxItems", min + pick(3)}};
    if (pick(4) == 0) {
      s["prefixItems"] = ordered_json::array({node(depth + 1), node(depth + 1)});
      s["items"] = pick(2) ? node(depth + 1) : ordered_json(false);
      if (s["items"] == false)
        s["maxItems"] = std::min(2, s["maxItems"].get<int>()), s["minItems"] = std::min(2, min);
    } else {
      s["items"] = node(depth + 1);
    }
    return s;
  }

  ordered_json anyof(int depth) {
    return {{"anyOf", ordered_json::array({node(depth + 1), node(depth + 1)})}};
  }

  ordered_json bounded_string() {
    const int min = pick(4);
    return {{"type", "string"}, {"minLength", min}, {"maxLength", min + pick(12)}};
  }

  ordered_json pattern_string() {
    static const char* kPatterns[] = {"^[A-Z][a-z]{1,6}$",     "^[0-9]{3}-[0-9]{4}$",
                                      "^(yes|no|maybe)$",      "^[a-f0-9]{2,8}$",
                                      "^v[0-9]\\.[0-9]{1,2}$", "^(Gen|Exo|Lev) [1-9][0-9]?:[0-9]+$",
                                      "^\\d{2}(\\.\\d)?$",     "^[\\w ]{1,10}$"};
    return {{"type", "string"}, {"pattern", kPatterns[pick(8)]}};
  }

  ordered_json integer() {
    ordered_json s = {{"type", "integer"}};
    const int lo = pick(200) - 100, width = pick(3) ? pick(50) : 1000 + pick(100000);
    const int shape = pick(4);
    if (shape != 1) s[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
    if (shape != 2) s[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + width + 2;
    return s;
  }

  ordered_json number() {
    ordered_json s = {{"type", "number"}};
    const double lo = (pick(400) - 200) / 4.0;
    s[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
    s[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(40);
    return s;
  }

  ordered_json enumeration() {
    static const ordered_json kValues = {"Genesis", "Exodus", "Psalms", 3,
                                         12,        true,     nullptr,  "Song of \"Solomon\""};
    ordered_json e = ordered_json::array();
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) {
      const auto& v = kValues[size_t(pick(8))];
      if (std::find(e.begin(), e.end(), v) == e.end()) e.push_back(v);
    }
    return {{"enum", e}};
  }

  ordered_json ref(int depth) {
    if (pick(2) || defs_.contains("list")) {
      if (!defs_.contains("list"))  // a recursive definition: a linked list of small integers
        defs_["list"] = {{"type", "object"},
                         {"properties",
                          {{"head", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
                           {"tail", {{"$ref", "#/$defs/list"}}}}},
                         {"required", {"head"}},
                         {"additionalProperties", false}};
      return {{"$ref", "#/$defs/list"}};
    }
    const std::string name = "def" + std::to_string(defs_.size());
    defs_[name] = node(depth + 1);
    return {{"$ref", "#/$defs/" + name}};
  }

  std::mt19937 rng_;
  ordered_json defs_ = ordered_json::object();
};

class SchemaGenerateTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions opt;
    opt.n_threads = 1;  // a 13M model: a second thread costs more in hand-offs than it saves
    opt.use_weight_cache = false;
    auto e = Engine::load(test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), opt);
    ASSERT_TRUE(e.is_ok()) << e.message();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  // Generates under `format`; returns the text, failing the test when generation fails or does
  // not end with the constraint complete.
  std::string generate(const OutputFormat& format, float temperature, uint64_t seed,
                       int max_tokens) {
    auto grammar = compile_output_format(format);
    EXPECT_TRUE(grammar.is_ok()) << grammar.message();
    if (!grammar) return "";
    Session session(engine_, 1024);
    EXPECT_TRUE(session.init().is_ok());
    GenerateOptions opt;
    opt.max_tokens = max_tokens;
    opt.sampling.temperature = temperature;
    opt.sampling.seed = seed;
    opt.constraint = make_constraint(*engine_, grammar.value());
    const auto prompt = engine_->tokenizer().encode("And the king said", true);
    auto r = session.generate(prompt, opt);
    EXPECT_TRUE(r.is_ok()) << r.message();
    if (!r) return "";
    EXPECT_EQ(r->stats.finish_reason, "stop") << r->text;
    EXPECT_TRUE(opt.constraint->can_end()) << r->text;
    EXPECT_LE(r->stats.generated_tokens, max_tokens);
    return r->text;
  }

  static std::shared_ptr<Engine> engine_;
};
std::shared_ptr<Engine> SchemaGenerateTest::engine_;

TEST_F(SchemaGenerateTest, FiftyRandomSchemasAlwaysValidate) {
  int valid = 0, runs = 0;
  size_t total_chars = 0;
  for (uint32_t c = 0; c < 50; ++c) {
    const ordered_json schema = SchemaGenerator(1000 + c).schema();
    const OutputFormat format{OutputFormat::Kind::kJsonSchema, schema.dump()};
    const test::SchemaValidator validator(schema);
    for (float temperature : {0.8f, 0.0f}) {
      ++runs;
      const std::string text = generate(format, temperature, 7 + c, 256);
      const auto parsed = ordered_json::parse(text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << "case " << c << " t=" << temperature << "\nschema "
                                          << schema.dump() << "\noutput " << text;
      const std::string why = validator.check(parsed);
      EXPECT_EQ(why, "") << "case " << c << " t=" << temperature << "\nschema " << schema.dump()
                         << "\noutput " << text;
      valid += why.empty();
      total_chars += text.size();
    }
  }
  EXPECT_EQ(valid, runs);
  EXPECT_GT(total_chars, size_t(runs) * 4);  // real values, not just "{}" everywhere
}

TEST_F(SchemaGenerateTest, JsonObjectModeAndTightBudgetsStillComplete) {
  for (int max_tokens : {12, 24, 64}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      const std::string text =
          generate({OutputFormat::Kind::kJsonObject, ""}, 0.8f, seed, max_tokens);
      const auto parsed = ordered_json::parse(text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << max_tokens << ": " << text;
      EXPECT_TRUE(parsed.is_object()) << text;
    }
  }
}

TEST_F(SchemaGenerateTest, GbnfGrammarShapesTheOutput) {
  const std::string g =
      "root ::= \"Verse \" [1-9] [0-9]? \": \" word (\" \" word){2,4} \".\"\n"
      "word ::= [A-Za-z]{1,8}\n";
  for (float t : {0.8f, 0.0f}) {
    const std::string text = generate({OutputFormat::Kind::kGbnf, g}, t, 5, 80);
    EXPECT_TRUE(std::regex_match(
        text, std::regex("Verse [1-9][0-9]?: [A-Za-z]{1,8}( [A-Za-z]{1,8}){2,4}\\.")))
        << text;
  }
}

}  // namespace
}  // namespace hearth
