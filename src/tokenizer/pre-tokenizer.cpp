// The table of GGUF pre-tokenizer names and their split patterns, and the split pipeline.
// The patterns are the ones the models' tokenizer.json files publish (llama.cpp names them in
// `llama-vocab.cpp`); several names share one pipeline.
#include "tokenizer/pre-tokenizer.h"

#include <cstdint>

namespace hearth {
namespace {

// GPT-2 (ByteLevel use_regex): case-sensitive contractions, letters / numbers / other runs with
// an optional leading space, whitespace that leaves its last space to the next word.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (tiktoken cl100k): case-insensitive contractions, one non-letter glued before a
// word, numbers in groups of up to three, newlines kept with the whitespace before them.
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: Llama 3 with one digit per piece.
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDigit = R"(\p{N})";
constexpr std::string_view kDigitRun = R"(\p{N}+)";
constexpr std::string_view kThreeAsciiDigits = R"([0-9][0-9][0-9])";
// Tekken (Mistral Nemo): words split at case changes ("CamelCase" -> "Camel" "Case").
constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o (o200k): Tekken's case-change words with contractions attached, digits by three.
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// BLOOM / Poro / GPT-3 Finnish: anything up to white space or a sentence mark. The ( | ) in
// the class are literal characters, as the published pattern has them.
constexpr std::string_view kBloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
// DeepSeek: CJK ideographs, Samaritan..CJK and Hangul blocks as runs.
constexpr std::string_view kDeepSeekCjk = R"([一-龥ࠀ-一가-퟿]+)";
constexpr std::string_view kNewline = "[\r\n]";
// Its Greek and letter-like entries that Unicode normalization would change (U+1F7D, U+2126...)
// are written as \uXXXX so no editor can rewrite them.
constexpr std::string_view kDeepSeekLlmLetters =
    R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)";
constexpr std::string_view kDeepSeekLlmPunct = R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)";
constexpr std::string_view kDeepSeekV3Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// BailingMoE's possessive form of the Qwen2 pattern (one newline per whitespace piece).
constexpr std::string_view kBailingMoe =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr std::string_view kSeedCoder =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerRow {
  std::vector<std::string_view> names;
  std::vector<std::string_view> patterns;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<PreTokenizerRow>& table() {
  static const std::vector<PreTokenizerRow> rows = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, kDigitRun, kThreeAsciiDigits}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {kLlama3}},
      {{"deepseek-llm"},
       {kNewline, kDeepSeekLlmLetters, kDeepSeekLlmPunct, R"(\s+$)", kDeepSeekCjk, kDigitRun}},
      {{"deepseek-coder"}, {kNewline, R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepSeekCjk, kDigit}},
      {{"deepseek-v3", "hunyuan-dense"},
       {R"(\p{N}{1,3})", R"([一-龥぀-ゟ゠-ヿ]+)", kDeepSeekV3Words}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, kThreeAsciiDigits}},
      {{"gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion", "granite-docling", "phi-2", "jina-es",
        "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe",
        "gigachat", "a.x-4.0", "mellum", "exaone4"},
       {kGpt2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {kDigit, kGpt2}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo", "hunyuan", "grok-2"},
       {kQwen2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, kDigit}},
      {{"tekken"}, {kTekken}, /*ignore_merges=*/true, /*add_bos=*/true},
      {{"chameleon"},
       {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))",
        kDigit, R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
       /*ignore_merges=*/false,
       /*add_bos=*/true},
      {{"gpt-4o", "llama4", "minimax-m2"}, {kGpt4o}},
      {{"superbpe"}, {kDigitRun, R"((?=(\d{3})+(?!\d)))"}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailingMoe}},
      {{"seed-coder"}, {kSeedCoder}},
  };
  return rows;
}

// Adds the pieces of one split of text[b, e) to `out`: matches and the gaps between them.
// An empty match only marks a boundary (as Hugging Face drops empty splits).
void split_piece(const SplitRegex& re, std::string_view text, size_t b, size_t e,
                 std::vector<std::pair<size_t, size_t>>& out) {
  const CodePoints c = CodePoints::from_utf8(text.substr(b, e - b));
  size_t gap = 0;  // start of text not yet emitted
  size_t i = 0;
  auto emit = [&](size_t from, size_t to) {
    if (from < to) out.emplace_back(b + c.offset[from], b + c.offset[to]);
  };
  while (i < c.size()) {
    const int64_t len = re.match_at(c, i);
    if (len < 0) {
      ++i;
      continue;
    }
    emit(gap, i);
    emit(i, i + static_cast<size_t>(len));
    // After an empty match the search resumes one code point later, as Oniguruma's does.
    i += len > 0 ? static_cast<size_t>(len) : 1;
    gap = len > 0 ? i : i - 1;
  }
  emit(gap, c.size());
}

}  // namespace

std::vector<std::string> PreTokenizer::patterns() const {
  std::vector<std::string> out;
  for (const SplitRegex& s : splits) out.push_back(s.pattern());
  return out;
}

std::optional<PreTokenizer> pre_tokenizer_for_gguf(std::string_view pre) {
  for (const PreTokenizerRow& row : table()) {
    for (std::string_view name : row.names) {
      if (name != pre) continue;
      PreTokenizer p;
      p.ignore_merges = row.ignore_merges;
      p.add_bos = row.add_bos;
      for (std::string_view pattern : row.patterns) {
        auto re = SplitRegex::compile(pattern);
        if (!re.is_ok()) return std::nullopt;  // the table is tested to compile
        p.splits.push_back(std::move(re).value());
      }
      return p;
    }
  }
  return std::nullopt;
}

std::vector<std::string_view> known_pre_tokenizer_names() {
  std::vector<std::string_view> out;
  for (const PreTokenizerRow& row : table())
    out.insert(out.end(), row.names.begin(), row.names.end());
  return out;
}

std::string_view gpt2_split_pattern() {
  return kGpt2;
}

std::vector<std::pair<size_t, size_t>> pre_tokenize(const PreTokenizer& pre,
                                                    std::string_view text) {
  if (text.empty()) return {};
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
  for (const SplitRegex& re : pre.splits) {
    std::vector<std::pair<size_t, size_t>> next;
    for (auto [b, e] : pieces) split_piece(re, text, b, e, next);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace hearth
