// libFuzzer entry point for constrained decoding's two parsers (also driven by replay-main.cpp in
// g++ builds); both take what a network client sends (response_format's JSON Schema, a GBNF
// grammar). The first byte picks one: even, the rest is a GBNF grammar; odd, a JSON Schema,
// whose GBNF must then parse too (the compiler's output is a grammar the parser accepts).
// Every error must be a one-line message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz-check.h"
#include "grammar/grammar.h"
#include "grammar/json-schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  hearth::GrammarLimits limits;
  limits.max_repetition = 64;
  limits.max_elements = 1u << 16;
  if (data[0] % 2 == 0) {
    fuzz_check_error(hearth::parse_gbnf(text, limits));
    return 0;
  }
  auto gbnf = hearth::json_schema_to_gbnf(text);
  fuzz_check_error(gbnf);
  if (!gbnf.is_ok()) return 0;
  // The compiled grammar must parse; only the parser's size limits may refuse it (a schema
  // asking for more repetitions than a grammar may hold).
  auto g = hearth::parse_gbnf(*gbnf);
  fuzz_check_error(g);
  if (!g.is_ok() && g.message().find("repetition count above") == std::string::npos &&
      g.message().find("more than") == std::string::npos)
    __builtin_trap();
  return 0;
}
