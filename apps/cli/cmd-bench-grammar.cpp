// `hearth bench-grammar`: what constrained decoding costs per token. Walks a grammar (a JSON
// Schema by default) with random allowed tokens over a vocabulary — a GGUF's, grown to a given
// size by joining its pieces (default 128256, Llama 3's size) — and times mask() and accept()
// per token. Compare with the decode step of a model with that vocabulary (hearth bench tg).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <set>

#include "base/mapped-file.h"
#include "command.h"
#include "formats/gguf.h"
#include "grammar/grammar-constraint.h"
#include "output-format-args.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

struct BenchGrammarArgs {
  OutputFormatArgs format;
  std::string vocab_file;
  int vocab_size = 128256, walks = 20, tokens = 256;
  uint64_t seed = 1;
  double decode_ms = 0;  // a decode step of the model the figures are compared with
};

// A tool-call-like schema: nested objects, an enum, bounded strings and integers, an array.
const char* kDefaultSchema = R"({"type":"object","properties":{
  "name":{"enum":["search","get_weather","send_email"]},
  "arguments":{"type":"object","properties":{
    "query":{"type":"string","maxLength":80},
    "city":{"type":"string","minLength":1,"maxLength":40},
    "days":{"type":"integer","minimum":1,"maximum":14},
    "units":{"enum":["metric","imperial"]},
    "recipients":{"type":"array","items":{"type":"string","maxLength":40},"maxItems":4},
    "urgent":{"type":"boolean"}},"required":["query"]}},
  "required":["name","arguments"]})";

// Token bytes: the GGUF's vocabulary (or the 256 bytes plus English-like pieces), grown to
// `size` with joins of two existing pieces, as BPE merges make longer tokens from shorter ones.
std::vector<std::string> build_vocabulary(const BenchGrammarArgs& a) {
  std::vector<std::string> pieces;
  if (!a.vocab_file.empty()) {
    GgufFile gguf = check(GgufFile::open(a.vocab_file));
    auto tok = check(Tokenizer::from_gguf(gguf));
    for (int32_t i = 0; i < tok->n_vocab(); ++i) pieces.push_back(tok->token_bytes(i));
  } else {
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    for (const char* w : {"the", " the", "ing", " of", " and", "\":", "\",", " {\"", "\"}",  "er",
                          " a",  "on",   " in", "es",  "12",   "00",  " \"", "ed",   "tion", " to"})
      pieces.push_back(w);
  }
  std::set<std::string> seen(pieces.begin(), pieces.end());
  std::mt19937_64 rng(a.seed);
  while (int(pieces.size()) < a.vocab_size) {
    const std::string& x = pieces[rng() % pieces.size()];
    const std::string& y = pieces[rng() % pieces.size()];
    std::string joined = x + y;
    if (joined.empty() || joined.size() > 16 || !seen.insert(joined).second) continue;
    pieces.push_back(std::move(joined));
  }
  pieces.resize(size_t(a.vocab_size));
  pieces.push_back("");  // the end-of-generation token
  return pieces;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

// This thread's CPU time: on a shared host wall time mostly measures the other processes.
struct CpuClock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  }
};

void run(BenchGrammarArgs a) {
  using Clock = CpuClock;
  auto ms_since = [](double t) { return Clock::now() - t; };
  const bool default_schema = a.format.grammar.empty() && a.format.grammar_file.empty() &&
                              a.format.json_schema.empty() && a.format.json_schema_file.empty();
  if (default_schema) a.format.json_schema = kDefaultSchema;
  const std::shared_ptr<const Grammar> grammar = output_grammar_or_exit(a.format);

  std::vector<std::string> pieces = build_vocabulary(a);
  auto t0 = Clock::now();
  const int32_t n_vocab = int32_t(pieces.size()), eos = n_vocab - 1;
  std::vector<uint8_t> ends(pieces.size(), 0);
  ends[size_t(eos)] = 1;
  auto vocab = std::make_shared<const TokenVocabulary>(std::move(pieces), std::move(ends));
  const double build_ms = ms_since(t0);

  std::mt19937_64 rng(a.seed);
  std::vector<double> mask_ms, accept_ms, first_mask_ms;
  std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
  uint64_t masks = 0, hits = 0, nodes = 0;
  size_t bytes_out = 0;
  for (int w = 0; w < a.walks; ++w) {
    GrammarConstraint c(grammar, vocab);  // a fresh one per walk, as per request
    for (int step = 0; step < a.tokens; ++step) {
      for (auto& x : logits) x = 0.0f;
      c.set_token_budget(a.tokens - step);
      auto t = Clock::now();
      c.mask(logits);
      const double m = ms_since(t);
      (step == 0 ? first_mask_ms : mask_ms).push_back(m);
      std::vector<int32_t> allowed;
      for (int32_t i = 0; i < n_vocab; ++i)
        if (logits[size_t(i)] == 0.0f) allowed.push_back(i);
      if (allowed.empty()) fail("bench-grammar: no token allowed (a bug)");
      const int32_t pick = allowed[rng() % allowed.size()];
      t = Clock::now();
      check(c.accept(pick));
      accept_ms.push_back(ms_since(t));
      if (pick == eos || c.complete()) break;
      bytes_out += vocab->bytes[size_t(pick)].size();
    }
    masks += c.stats().masks;
    hits += c.stats().cache_hits;
    nodes += c.stats().trie_nodes_visited;
  }
  double sum = 0;
  for (double m : mask_ms) sum += m;
  for (double m : first_mask_ms) sum += m;
  const double per_token = sum / double(mask_ms.size() + first_mask_ms.size());
  std::printf("vocabulary: %d tokens (%s), trie %zu nodes, trie built in %.0f ms\n", n_vocab - 1,
              a.vocab_file.empty() ? "synthetic" : a.vocab_file.c_str(), vocab->trie.nodes().size(),
              build_ms);
  std::printf("grammar: %s, %zu rules, %zu elements\n",
              default_schema ? "default tool-call schema" : "given", grammar->alternatives.size(),
              grammar->elements.size());
  std::printf("walks: %d x up to %d tokens, %zu tokens, %.1f bytes/token\n", a.walks, a.tokens,
              mask_ms.size() + first_mask_ms.size(),
              double(bytes_out) / double(std::max<size_t>(1, accept_ms.size())));
  std::printf("(times are this thread's CPU time)\n");
  std::printf("mask per token: mean %.3f ms, p50 %.3f, p90 %.3f, p99 %.3f, max %.3f ms\n",
              per_token, percentile(mask_ms, 0.5), percentile(mask_ms, 0.9),
              percentile(mask_ms, 0.99), percentile(mask_ms, 1.0));
  std::printf("first mask of a walk: mean %.3f ms; accept: mean %.4f ms\n",
              first_mask_ms.empty() ? 0 : [&] {
                double s = 0;
                for (double m : first_mask_ms) s += m;
                return s / double(first_mask_ms.size());
              }(),
              [&] {
                double s = 0;
                for (double m : accept_ms) s += m;
                return accept_ms.empty() ? 0 : s / double(accept_ms.size());
              }());
  std::printf("state cache: %.1f%% hits, %.0f trie nodes visited per miss\n",
              masks ? 100.0 * double(hits) / double(masks) : 0.0,
              masks > hits ? double(nodes) / double(masks - hits) : 0.0);
  if (a.decode_ms > 0)
    std::printf("against a %.2f ms decode step: %.1f%% per token (target <= 10%%)\n", a.decode_ms,
                100.0 * per_token / a.decode_ms);
}

void setup(CLI::App& root) {
  static BenchGrammarArgs args;
  auto* a = &args;
  auto* cmd = root.add_subcommand("bench-grammar", "time constrained decoding's mask per token");
  add_output_format_options(cmd, &a->format);
  cmd->add_option("--vocab", a->vocab_file,
                  "a GGUF whose vocabulary to start from (default: bytes)");
  cmd->add_option("--vocab-size", a->vocab_size, "grow the vocabulary to this many tokens (128256)")
      ->check(CLI::Range(256, 1 << 22));
  cmd->add_option("-r,--walks", a->walks, "walks, each a fresh constraint (20)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("-n,--tokens", a->tokens, "token budget per walk (256)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-s,--seed", a->seed, "seed of the vocabulary growth and the walks (1)");
  cmd->add_option("--decode-ms", a->decode_ms,
                  "a decode step's time (hearth bench tg of a model of this vocabulary size), to "
                  "print the mask's share");
  cmd->callback([a] { run(*a); });
}

HEARTH_REGISTER_COMMAND(95, setup);

}  // namespace
}  // namespace hearth::cli
