// libFuzzer entry point for the parsers that read what a model writes, which a prompt can steer
// anywhere: the reasoning splitter (runtime/reasoning-split.h), the tool-call parser and its
// streaming gate (runtime/tool-calls/tool-call-parser.h) in every family's syntax, and the stop
// strings (runtime/stop-strings.h). Beyond not crashing, each must give a streamed response the
// same answer however the text was cut into pieces, as their headers promise:
// - reasoning and content pushed piece by piece equal split_reasoning() of the whole text;
// - what the tool-call gate passed, plus the parse of what it held, equals the parse of the whole
//   text (content and calls);
// - the stop filter shows the same text, and matches or not, however the text arrives.
// Input: a family byte, a flags byte, a seed for the cut points, up to three stop strings (a
// length byte each), then the model's text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "base/printable.h"
#include "runtime/reasoning-split.h"
#include "runtime/stop-strings.h"
#include "runtime/tool-calls/tool-call-parser.h"

using namespace hearth;

namespace {

constexpr ToolCallFamily kFamilies[] = {
    ToolCallFamily::kGeneric,        ToolCallFamily::kHermes,
    ToolCallFamily::kLlama3,         ToolCallFamily::kMistral,
    ToolCallFamily::kMistralArgs,    ToolCallFamily::kDeepSeek,
    ToolCallFamily::kFunctionaryV31, ToolCallFamily::kFunctionaryV32,
    ToolCallFamily::kFirefunction};

[[noreturn]] void broken(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_output: %s for text [%s]\n", what, printable(text, 400).c_str());
  __builtin_trap();
}

// Cut points for `text` from `seed`: pieces of 1 to 8 bytes (a tag or marker split anywhere).
std::vector<std::string_view> pieces(std::string_view text, uint8_t seed) {
  std::vector<std::string_view> out;
  uint32_t s = seed * 2654435761u + 1;
  for (size_t at = 0; at < text.size();) {
    s = s * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(text.size() - at, 1 + (s >> 16) % 8);
    out.push_back(text.substr(at, n));
    at += n;
  }
  return out;
}

void check_reasoning(std::string_view text, bool starts_inside, uint8_t seed) {
  const ReasoningPieces whole = split_reasoning(text, starts_inside);
  ReasoningSplitter splitter(starts_inside);
  ReasoningPieces streamed;
  const auto parts = pieces(text, seed);
  for (size_t i = 0; i < parts.size(); ++i) {
    const ReasoningPieces p = splitter.take(parts[i], i + 1 == parts.size());
    streamed.reasoning += p.reasoning;
    streamed.content += p.content;
  }
  if (parts.empty()) {
    const ReasoningPieces p = splitter.flush();
    streamed.reasoning += p.reasoning;
    streamed.content += p.content;
  }
  if (streamed.reasoning != whole.reasoning || streamed.content != whole.content)
    broken("streamed reasoning differs from the whole text's", text);
}

void check_tool_calls(ToolCallFamily family, std::string_view text, uint8_t seed) {
  static const std::vector<std::string> kDeclared = {"get_weather", "f", "search"};
  const ToolCallParse whole = parse_tool_calls(family, text, kDeclared);
  for (const ToolCall& c : whole.calls)
    if (c.name != "get_weather" && c.name != "f" && c.name != "search")
      broken("a call of an undeclared function", text);
  ToolCallStreamGate gate(family);
  std::string passed;
  for (std::string_view p : pieces(text, seed)) passed += gate.push(p);
  const ToolCallParse held = parse_tool_calls(family, gate.finish(), kDeclared);
  bool same = passed + held.content == whole.content && held.calls.size() == whole.calls.size();
  for (size_t i = 0; same && i < whole.calls.size(); ++i)
    same = held.calls[i].name == whole.calls[i].name &&
           held.calls[i].arguments == whole.calls[i].arguments;
  if (!same) broken("the tool-call gate's stream differs from the whole text's parse", text);
}

void check_stops(const std::vector<std::string>& stops, std::string_view text, uint8_t seed) {
  StopStringFilter at_once(stops);
  std::string once = at_once.push(std::string(text));
  once += at_once.flush();
  StopStringFilter streamed(stops);
  std::string shown;
  for (std::string_view p : pieces(text, seed)) shown += streamed.push(std::string(p));
  shown += streamed.flush();
  if (shown != once || streamed.matched() != at_once.matched()) {
    for (const std::string& st : stops) std::fprintf(stderr, "stop [%s]\n", printable(st).c_str());
    std::fprintf(stderr, "at once [%s] (%d), streamed [%s] (%d)\n", printable(once).c_str(),
                 int(at_once.matched()), printable(shown).c_str(), int(streamed.matched()));
    broken("stop strings cut a streamed text differently", text);
  }
  if (text.substr(0, once.size()) != once) broken("stop strings showed text never written", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const ToolCallFamily family = kFamilies[data[0] % std::size(kFamilies)];
  const bool starts_inside = data[1] & 1;
  const uint8_t seed = data[2];
  const int n_stops = data[3] % 4;
  size_t at = 4;
  std::vector<std::string> stops;
  for (int i = 0; i < n_stops && at < size; ++i) {
    const size_t n = std::min<size_t>(data[at] % 16, size - at - 1);
    if (n > 0) stops.emplace_back(reinterpret_cast<const char*>(data) + at + 1, n);
    at += 1 + n;
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + at, size - at);
  check_reasoning(text, starts_inside, seed);
  check_tool_calls(family, text, seed);
  check_stops(stops, text, seed);
  return 0;
}
