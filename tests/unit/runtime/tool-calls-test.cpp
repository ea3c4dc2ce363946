// Tool calls: the family detector over the published templates, each family's parser over
// outputs shaped like the models' own (and junk that must stay content), the streaming gate at
// every split point, and the call grammars accepting valid calls and refusing invalid ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar-matcher.h"
#include "grammar/grammar.h"
#include "runtime/tool-calls/tool-call-family.h"
#include "runtime/tool-calls/tool-call-grammar.h"
#include "runtime/tool-calls/tool-call-parser.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using F = ToolCallFamily;
const std::vector<std::string> kDeclared = {"get_weather", "search", "brave_search"};

TEST(ToolCallFamily, DetectedFromPublishedTemplates) {
  const std::string dir = test::source_dir() + "/tests/unit/chat/fixtures/published/";
  const std::vector<std::pair<std::string, F>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct", F::kHermes},
      {"Qwen-Qwen3-0.6B", F::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", F::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", F::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", F::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", F::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", F::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", F::kMistralArgs},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", F::kDeepSeek},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", F::kDeepSeek},
      {"meetkai-functionary-medium-v3.1", F::kFunctionaryV31},
      {"meetkai-functionary-medium-v3.2", F::kFunctionaryV32},
      {"fireworks-ai-llama-3-firefunction-v2", F::kFirefunction},
      {"google-gemma-2-2b-it", F::kGeneric},
      {"microsoft-phi-4", F::kGeneric},
  };
  for (const auto& [file, family] : cases) {
    const std::string text = test::read_file(dir + file + ".jinja");
    EXPECT_EQ(tool_call_family_name(detect_tool_call_family(text)), tool_call_family_name(family))
        << file;
  }
}

struct ParseCase {
  F family;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;  // empty: the text stays content
};

const std::vector<ParseCase> kParseCases = {
    // Hermes / Qwen: one call, two calls, text before, Qwen3's newlines, a string arguments.
    {F::kHermes,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris"})"}}},
    {F::kHermes,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", "
     "\"arguments\": {\"q\": \"a}b\\\"c\"}}\n</tool_call>",
     "Let me check.\n",
     {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}, {"search", R"({"q":"a}b\"c"})"}}},
    {F::kHermes,
     "<tool_call>{\"name\":\"search\",\"arguments\":\"{\\\"q\\\":\\\"x\\\"}\"}</tool_call>",
     "",
     {{"search", R"({"q":"x"})"}}},
    {F::kHermes,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}",
     "",
     {{"search", "{}"}}},  // cut before the close tag
    {F::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x", "", {}},
    {F::kHermes, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>", "", {}},
    {F::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": [1]}\n</tool_call>", "", {}},
    {F::kHermes, "I would use <tool_call> tags.", "", {}},
    {F::kHermes,
     "<tool_call>{\"name\":\"search\",\"arguments\":{}}</tool_call> and more words",
     "",
     {}},
    // Llama 3.x: JSON with "parameters", several separated by ';', python_tag, builtin call.
    {F::kLlama3,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
     "",
     {{"get_weather", R"({"city":"Oslo"})"}}},
    {F::kLlama3,
     "{\"name\": \"search\", \"parameters\": {\"q\": \"a\"}}; {\"name\": \"search\", "
     "\"parameters\": {\"q\": \"b\"}}",
     "",
     {{"search", R"({"q":"a"})"}, {"search", R"({"q":"b"})"}}},
    {F::kLlama3,
     "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}",
     "",
     {{"search", R"({"q":"x"})"}}},
    {F::kLlama3,
     "<|python_tag|>brave_search.call(query=\"weather in Paris\", n=3, safe=True)",
     "",
     {{"brave_search", R"({"query":"weather in Paris","n":3,"safe":true})"}}},
    {F::kLlama3, "The answer is {\"name\": \"x\"}.", "", {}},
    {F::kLlama3, "{\"name\": \"search\", \"parameters\": {\"q\": ", "", {}},
    // Mistral: JSON list, and the [ARGS] form with and without [CALL_ID].
    {F::kMistral,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": "
     "\"abc123def\"}]",
     "",
     {{"get_weather", R"({"city":"Rome"})"}}},
    {F::kMistralArgs,
     "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]search[ARGS]{\"q\": 1}",
     "Sure.",
     {{"get_weather", R"({"city":"Rome"})"}, {"search", R"({"q":1})"}}},
    {F::kMistralArgs,
     "[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{\"q\": \"z\"}",
     "",
     {{"search", R"({"q":"z"})"}}},
    {F::kMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\"", "", {}},
    // DeepSeek R1 / V3.
    {F::kDeepSeek,
     "I'll look it up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_"
     "weather\n```json\n{\"city\": \"Lima\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
     "function<｜tool▁sep｜>search\n```json\n{\"q\": \"rain\"}\n```<｜tool▁call▁end｜><｜tool▁"
     "calls▁end｜>",
     "I'll look it up.",
     {{"get_weather", R"({"city":"Lima"})"}, {"search", R"({"q":"rain"})"}}},
    {F::kDeepSeek,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"
     "\"city\": ",
     "",
     {}},
    // functionary v3.1 and v3.2 (v3.2's first ">>>" is in the prompt).
    {F::kFunctionaryV31,
     "<function=search>{\"q\": \"cats\"}</function>",
     "",
     {{"search", R"({"q":"cats"})"}}},
    {F::kFunctionaryV32,
     "search\n{\"q\": \"cats\"}>>>get_weather\n{\"city\": \"Bern\"}",
     "",
     {{"search", R"({"q":"cats"})"}, {"get_weather", R"({"city":"Bern"})"}}},
    {F::kFunctionaryV32,
     "all\nLet me search.>>>search\n{\"q\": \"cats\"}",
     "Let me search.",
     {{"search", R"({"q":"cats"})"}}},
    {F::kFunctionaryV32, "all\nJust text, no call.", "", {}},
    {F::kFunctionaryV32, "unknown\n{}", "", {}},
    // firefunction v2.
    {F::kFirefunction,
     " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}, {\"name\": "
     "\"search\", \"arguments\": {\"q\": \"x\"}}]",
     " ",
     {{"get_weather", R"({"city":"Kyiv"})"}, {"search", R"({"q":"x"})"}}},
    {F::kFirefunction, " functools[{\"name\": \"get_weather\"", "", {}},
    // Generic: the tool_calls wrapper, a bare call, a fenced one, prose with braces.
    {F::kGeneric,
     "{\"tool_calls\": [{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]}",
     "",
     {{"search", R"({"q":"x"})"}}},
    {F::kGeneric,
     "Calling:\n```json\n{\"name\": \"search\", \"arguments\": {\"q\": 2}}\n```",
     "Calling:\n",
     {{"search", R"({"q":2})"}}},
    {F::kGeneric, "Use {braces} freely.", "", {}},
    {F::kGeneric, "{\"name\": \"nope\", \"arguments\": {}}", "", {}},
    {F::kGeneric, "", "", {}},
};

TEST(ToolCallParser, EachFamilyParsesItsCallsAndLeavesJunkAsContent) {
  for (const auto& c : kParseCases) {
    const ToolCallParse got = parse_tool_calls(c.family, c.text, kDeclared);
    const std::string what = std::string(tool_call_family_name(c.family)) + ": " + c.text;
    ASSERT_EQ(got.calls.size(), c.calls.size()) << what;
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, c.calls[i].name) << what;
      EXPECT_EQ(got.calls[i].arguments, c.calls[i].arguments) << what;
    }
    // No calls: the whole text is content, unchanged.
    EXPECT_EQ(got.content, c.calls.empty() ? c.text : c.content) << what;
  }
}

// Streamed in two or three pieces at every split point: the content pushed out plus the parse
// of what the gate held equals the parse of the whole text, and no marker byte leaks early.
TEST(ToolCallStreamGate, SplitAnywhereMatchesTheWholeParse) {
  for (const auto& c : kParseCases) {
    const ToolCallParse whole = parse_tool_calls(c.family, c.text, kDeclared);
    for (size_t a = 0; a <= c.text.size(); ++a) {
      for (size_t b = a; b <= c.text.size(); b += std::max<size_t>(1, c.text.size() / 7)) {
        ToolCallStreamGate gate(c.family);
        std::string shown = gate.push(c.text.substr(0, a));
        shown += gate.push(c.text.substr(a, b - a));
        shown += gate.push(c.text.substr(b));
        const ToolCallParse tail = parse_tool_calls(c.family, gate.finish(), kDeclared);
        ASSERT_EQ(tail.calls.size(), whole.calls.size()) << c.text << " split " << a << "," << b;
        for (size_t i = 0; i < whole.calls.size(); ++i)
          EXPECT_EQ(tail.calls[i].arguments, whole.calls[i].arguments);
        EXPECT_EQ(shown + tail.content, whole.content) << c.text << " split " << a << "," << b;
      }
    }
  }
}

// Junk: every prefix of every case and seeded random byte edits of it, read by every family's
// parser. Nothing crashes; no calls means the text comes back unchanged; a call is always of a
// declared function with a JSON object as its arguments.
TEST(ToolCallParser, TruncatedAndMutatedOutputsNeverYieldABrokenCall) {
  const F families[] = {F::kGeneric,        F::kHermes,         F::kLlama3,
                        F::kMistral,        F::kMistralArgs,    F::kDeepSeek,
                        F::kFunctionaryV31, F::kFunctionaryV32, F::kFirefunction};
  std::mt19937 rng(1234);
  const std::string junk = "{}[]\"\\:,<>|\n ax0\xE2\x96\x81\xEF\xBD\x9C";
  size_t parsed = 0, texts = 0;
  for (const auto& c : kParseCases) {
    std::vector<std::string> variants;
    for (size_t n = 0; n <= c.text.size(); ++n) variants.push_back(c.text.substr(0, n));
    for (int k = 0; k < 40 && !c.text.empty(); ++k) {
      std::string t = c.text;
      for (int e = 0; e < 1 + int(rng() % 3); ++e) t[rng() % t.size()] = junk[rng() % junk.size()];
      variants.push_back(t);
    }
    for (const auto& text : variants) {
      for (F family : families) {
        const ToolCallParse p = parse_tool_calls(family, text, kDeclared);
        ++texts;
        if (p.calls.empty()) {
          EXPECT_EQ(p.content, text);
          continue;
        }
        ++parsed;
        for (const auto& call : p.calls) {
          EXPECT_TRUE(std::find(kDeclared.begin(), kDeclared.end(), call.name) != kDeclared.end());
          const auto args = nlohmann::json::parse(call.arguments, nullptr, false);
          EXPECT_TRUE(!args.is_discarded() && args.is_object()) << call.arguments;
        }
      }
    }
  }
  EXPECT_GT(parsed, 100u);  // the edits leave many calls intact: the check above did run
  std::printf("%zu texts, %zu with calls\n", texts, parsed);
}

TEST(ToolCallStreamGate, PlainTextFlowsAndAMarkerPrefixIsHeldBack) {
  ToolCallStreamGate gate(F::kHermes);
  EXPECT_EQ(gate.push("Hello <tool"), "Hello ");
  EXPECT_FALSE(gate.in_call());
  EXPECT_EQ(gate.push("box> world"), "<toolbox> world");
  EXPECT_EQ(gate.push("<tool_call>{"), "");
  EXPECT_TRUE(gate.in_call());
  EXPECT_EQ(gate.finish(), "<tool_call>{");
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  const auto s = m.step(m.start(), text);
  return s != GrammarMatcher::kDead && m.can_end(s);
}

std::shared_ptr<const Grammar> compile(const std::string& gbnf) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.is_ok()) << g.message() << "\n" << gbnf;
  if (!g.is_ok()) return nullptr;
  return std::make_shared<Grammar>(std::move(g.value()));
}

const std::vector<ToolFunction> kFunctions = {
    {"get_weather",
     R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false})"},
    {"search",
     R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false})"},
};

TEST(ToolCallGrammar, HermesAdmitsDeclaredCallsWithValidArgumentsOnly) {
  auto g = compile(tool_call_gbnf(kFunctions, {F::kHermes, true}).value());
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(
      g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>"));
  EXPECT_TRUE(
      matches(g,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": "
              "\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
              "\"x\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      matches(g,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": "
              "\"k\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>"));
  auto one = compile(tool_call_gbnf(kFunctions, {F::kHermes, false}).value());
  EXPECT_FALSE(matches(one,
                       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
                       "{\"q\": \"x\"}}\n</tool_call>"));
}

// Every family's grammar compiles, and what it produces (one fixed sample per family) is what
// that family's parser reads back as the same call.
TEST(ToolCallGrammar, EveryFamilyRoundTripsThroughItsParser) {
  const std::vector<std::pair<F, std::string>> samples = {
      {F::kHermes,
       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>"},
      {F::kLlama3, "{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}"},
      {F::kMistral, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]"},
      {F::kMistralArgs, "[TOOL_CALLS]search[ARGS]{\"q\": \"x\"}"},
      {F::kDeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"q\": "
       "\"x\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {F::kFunctionaryV31, "<function=search>{\"q\": \"x\"}</function>"},
      {F::kFunctionaryV32, "search\n{\"q\": \"x\"}"},
      {F::kFirefunction, " functools[{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]"},
      {F::kGeneric, "{\"tool_calls\": [{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]}"},
  };
  for (const auto& [family, sample] : samples) {
    auto gbnf = tool_call_gbnf(kFunctions, {family, true});
    ASSERT_TRUE(gbnf.is_ok()) << gbnf.message();
    auto g = compile(gbnf.value());
    ASSERT_TRUE(g) << tool_call_family_name(family);
    EXPECT_TRUE(matches(g, sample)) << tool_call_family_name(family) << "\n" << gbnf.value();
    const ToolCallParse p = parse_tool_calls(family, sample, {"search", "get_weather"});
    ASSERT_EQ(p.calls.size(), 1u) << tool_call_family_name(family);
    EXPECT_EQ(p.calls[0].name, "search");
    EXPECT_EQ(p.calls[0].arguments, R"({"q":"x"})");
  }
}

TEST(ToolCallGrammar, UnsupportedSchemaNamesTheFunction) {
  auto g = tool_call_gbnf({{"f", R"({"type":"object"})"}, {"g", R"({"type":"object","not":{}})"}},
                          {F::kHermes, true});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.message().find("tools[1]"), std::string::npos) << g.message();
}

TEST(ToolCallGrammar, PrefixRenamesRulesOnly) {
  EXPECT_EQ(prefix_gbnf_rules("root ::= a \"b-c\" [a-z]{0,2} # x y\nws ::= \" \"?\n", "p-"),
            "p-root ::= p-a \"b-c\" [a-z]{0,2} # x y\np-ws ::= \" \"?\n");
}

}  // namespace
}  // namespace hearth
