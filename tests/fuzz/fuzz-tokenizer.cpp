// libFuzzer entry point for the tokenizer data a model directory brings (also driven by
// replay-main.cpp in g++ builds): the first byte picks the parser, the rest is its input. 0: a
// SentencePiece .model (protobuf), 1: a tokenizer.json, 2: a pre-tokenizer split regex, which
// then splits a fixed text. Every error must be a one-line message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz-check.h"
#include "tokenizer/hf-tokenizer-json.h"
#include "tokenizer/sentencepiece-model.h"
#include "tokenizer/split-regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  switch (data[0] % 3) {
    case 0:
      fuzz_check_error(hearth::parse_sentencepiece_model(body, n, "fuzz.model"));
      break;
    case 1:
      fuzz_check_error(hearth::parse_hf_tokenizer_json(
          std::string(reinterpret_cast<const char*>(body), n), "tokenizer.json"));
      break;
    default: {
      auto re =
          hearth::SplitRegex::compile(std::string_view(reinterpret_cast<const char*>(body), n));
      fuzz_check_error(re);
      if (!re.is_ok()) break;
      static const hearth::CodePoints text =
          hearth::CodePoints::from_utf8("Hello, world! 123 h\xc3\xa9llo\n\t  don't x");
      for (size_t pos = 0; pos < text.size(); ++pos) {
        const int64_t len = re->match_at(text, pos);
        if (len < -1 || len > int64_t(text.size() - pos)) __builtin_trap();
      }
      break;
    }
  }
  return 0;
}
