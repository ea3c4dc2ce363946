// libFuzzer entry point for encoding text with real vocabularies: llama.cpp's vocab-only GGUFs of
// the shared test data (SentencePiece llama-spm; byte-level BPE gpt-2, deepseek-coder, mpt,
// refact) and kjv-13m's, loaded once. The first byte picks the vocabulary and the mode; the rest
// is the text a client sends. Beyond not crashing:
// - every id is in the vocabulary, with or without control-token texts parsed;
// - decoding the ids gives the text back when it is valid UTF-8 (after the space a SentencePiece
//   vocabulary prefixes), less the bytes the vocabulary has no token for (refact's lacks 0xF1:
//   a byte-level BPE GGUF drops those bytes, as llama.cpp does);
// - StreamDecoder, fed the ids one at a time, gives what decode() of them all gives.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/printable.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace hearth;

namespace {

struct Vocab {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  bool spm = false;  // SentencePiece: decoding starts with the space the encoder prefixed
  std::array<bool, 256> spells{};  // bytes that encode and decode back on their own
};

const std::vector<Vocab>& vocabs() {
  static const std::vector<Vocab> v = [] {
    const char* env = std::getenv("HEARTH_SHARED");
    const std::string shared = env && *env ? env : HEARTH_SHARED_DEFAULT_DIR;
    std::vector<Vocab> out;
    for (const char* f :
         {"models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-gpt-2.gguf",
          "models/vocab/ggml-vocab-deepseek-coder.gguf", "models/vocab/ggml-vocab-mpt.gguf",
          "models/vocab/ggml-vocab-refact.gguf", "goldens/kjv-13m/kjv-13m-q8_0.gguf"}) {
      auto g = GgufFile::open(shared + "/" + f);
      auto t =
          g.is_ok() ? Tokenizer::from_gguf(*g) : Result<std::unique_ptr<Tokenizer>>(g.status());
      if (!t.is_ok()) {
        std::fprintf(stderr, "fuzz_encode: %s\n", t.message().c_str());
        std::abort();  // a target that encodes nothing must not pass
      }
      const bool spm = (*t)->kind().rfind("llama", 0) == 0;
      Vocab v{f, std::move(*t), spm, {}};
      for (int b = 0; b < 256; ++b) {
        const std::string one(1, static_cast<char>(b));
        // (SentencePiece vocabularies here fall back to byte tokens: every byte is spelt.)
        v.spells[size_t(b)] = spm || v.tok->decode(v.tok->encode(one, false, false)) == one;
      }
      out.push_back(std::move(v));
    }
    return out;
  }();
  return v;
}

[[noreturn]] void broken(const Vocab& v, const char* what, std::string_view text,
                         const std::string& got) {
  std::fprintf(stderr, "fuzz_encode: %s: %s for [%s], got [%s]\n", v.name.c_str(), what,
               printable(text, 400).c_str(), printable(got, 400).c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = vocabs();
  const Vocab& v = all[data[0] % all.size()];
  const bool parse_special = data[0] & 0x80;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Tokenizer& tok = *v.tok;
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) broken(v, "an id outside the vocabulary", text, "");
  const std::string decoded = tok.decode(ids);
  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  // (SentencePiece writes spaces as U+2581 "▁", so a text holding that character itself
  // decodes with a space there, as the reference library's does.)
  const bool lossless = !v.spm || text.find("\xe2\x96\x81") == std::string_view::npos;
  if (!parse_special && lossless && utf8::sanitize(text) == text) {
    std::string spelt;
    for (char c : text)
      if (v.spells[static_cast<uint8_t>(c)]) spelt += c;
    // SentencePiece decodes its prefixed space back; a text that starts with a space of its own
    // keeps it.
    const std::string want = v.spm && !text.empty() ? " " + spelt : spelt;
    if (decoded != want) broken(v, "decode(encode(text)) is not the text", text, decoded);
    // (A dropped lead byte leaves its continuation bytes: not UTF-8, which the stream replaces.)
    if (utf8::sanitize(decoded) == decoded && streamed != decoded)
      broken(v, "StreamDecoder differs from decode()", text, streamed);
  }
  return 0;
}
