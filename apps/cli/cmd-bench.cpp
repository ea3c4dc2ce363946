// `hearth bench`: the tool every performance claim comes from. Prompt processing (-p), generation
// (-n), TTFT, cold/warm load, peak RSS and energy, each next to its roofline (apps/bench/); with
// --serve URL, a load generator for a running server (apps/bench/serve-load.h).
#include <cstdio>
#include <sstream>

#include "bench-runner.h"
#include "command.h"
#include "common.h"
#include "serve-load.h"
#include "synthetic-model.h"

namespace hearth::cli {
namespace {

struct BenchArgs {
  RuntimeArgs rt;
  std::string synthetic, prompts = "128", batch;
  int n_gen = 128, reps = 3, depth = 0;
  bool json = false, csv = false, keep = false;
  SamplingParams sampling;  // used when any of its flags is given
  bool sampled = false;
  bench::ServeLoadOptions serve;  // --serve URL and the load's shape
};

std::vector<int> parse_sizes(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || !end || *end || v < 0 || v > 1 << 20)
      fail(std::string(flag) + ": '" + text + "' is not a list of token counts like 128,512");
    out.push_back(int(v));
  }
  if (out.empty()) fail(std::string(flag) + ": give at least one size");
  return out;
}

// Exits 1 after printing when any request failed, so a script notices.
void run_serve(const BenchArgs& args) {
  if (!args.synthetic.empty() || !args.rt.model.model.empty())
    fail("bench: --serve measures a running server; give no -m or --synthetic with it");
  BenchArgs a = args;
  if (a.sampled) {  // the sampling flags: sampled requests instead of greedy ones
    a.serve.sampled = true;
    a.serve.temperature = a.sampling.temperature;
    a.serve.top_p = a.sampling.top_p;
    a.serve.top_k = a.sampling.top_k;
    a.serve.min_p = a.sampling.min_p;
  }
  check(bench::check_serve_options(a.serve));
  const auto traces = check(bench::run_serve_load(a.serve, [](const std::string& s) {
    std::fprintf(stderr, "hearth bench: %s\n", s.c_str());
  }));
  const bench::ServeSummary s = bench::summarize(traces);
  const std::string out =
      a.json ? bench::render_serve_json(a.serve, s) : bench::render_serve_markdown(a.serve, s);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  if (s.failures > 0) std::exit(1);
}

void run(const BenchArgs& a) {
  if (!a.serve.url.empty()) return run_serve(a);
  bench::BenchOptions o;
  if (a.synthetic.empty()) {
    if (a.rt.model.model.empty() && a.rt.model.repo_id.empty())
      fail("bench: give a model with -m MODEL or --synthetic SHAPE:TYPE (e.g. llama2-7b:q4_0)");
    o.model_path = check(resolve_model(a.rt.model));
  } else if (!a.rt.model.model.empty()) {
    fail("bench: give either -m or --synthetic, not both");
  }
  o.synthetic = a.synthetic;
  o.prompt_sizes = parse_sizes(a.prompts, "-p");
  o.n_gen = a.n_gen;
  o.reps = a.reps;
  o.threads = a.rt.threads;
  o.gpu_layers = parse_gpu_layers(a.rt.gpu_layers);
  o.cpu_moe = a.rt.cpu_moe;
  o.no_cache = a.rt.no_cache;
  o.cpu = a.rt.cpu;
  o.cuda = a.rt.cuda;
  o.keep = a.keep;
  o.depth = a.depth;
  if (!a.batch.empty()) o.batch_sizes = parse_sizes(a.batch, "--batch");
  o.ctx_size = a.rt.ctx_size;
  // Every K type with every V type (llama-bench's lists), alternated within each test.
  o.kv_types.clear();
  for (DType k : a.rt.cache_types_k)
    for (DType v : a.rt.cache_types_v) o.kv_types.push_back({k, v});
  if (a.sampled) o.sampling = a.sampling;
  o.progress = [](const std::string& s) { std::fprintf(stderr, "hearth bench: %s\n", s.c_str()); };
  const bench::BenchReport r = check(bench::run_bench(o));
  const std::string out = a.json  ? bench::render_json(r)
                          : a.csv ? bench::render_csv(r)
                                  : bench::render_markdown(r);
  std::fputs(out.c_str(), stdout);
}

void setup(CLI::App& root) {
  static BenchArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("bench", "measure speed, load time and memory against rooflines");
  add_runtime_options(cmd, &a->rt);
  std::string shapes;
  for (const std::string& s : bench::synthetic_shape_names())
    shapes += (shapes.empty() ? "" : "|") + s;
  cmd->add_option(
      "--synthetic", a->synthetic,
      "bench random weights of a real shape: " + shapes +
          " : f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|q5_k_m (e.g. llama2-7b:q4_0; q4_k_m: Q4_K "
          "with llama-quantize's Q6_K tensors)");
  cmd->add_option("-p,--n-prompt", a->prompts,
                  "prompt sizes to process, comma-separated (default 128; 0 skips)");
  cmd->add_option("-n,--n-gen", a->n_gen, "tokens to generate (default 128; 0 skips)");
  cmd->add_option("-r,--repetitions", a->reps, "repetitions of each test (default 3)");
  cmd->add_option("--batch", a->batch,
                  "also decode B sequences in lockstep, one forward per step, for each B of a "
                  "list like 8,32 (rows 'tg<n> x B', aggregate tok/s)");
  cmd->add_option("-d,--depth", a->depth,
                  "tokens already in the cache before each pp and tg test (default 0)");
  // Any of these adds a "tg sampled" row (same settings as `hearth run`'s defaults otherwise),
  // measured in alternation with the greedy tg row; with --serve, the requests sample so.
  const char* sampling_flags[] = {"--temp", "--top-k", "--top-p", "--min-p"};
  cmd->add_option(
      sampling_flags[0], a->sampling.temperature,
      "tg sampled (and --serve's requests): temperature (default 0.8; 0 = greedy through the "
      "sampler)");
  cmd->add_option(sampling_flags[1], a->sampling.top_k, "tg sampled: top-k, 0 = off (default 40)");
  cmd->add_option(sampling_flags[2], a->sampling.top_p,
                  "tg sampled: top-p, 1 = off (default 0.95)");
  cmd->add_option(sampling_flags[3], a->sampling.min_p,
                  "tg sampled: min-p, 0 = off (default 0.05)");
  cmd->add_option("--serve", a->serve.url,
                  "load a running OpenAI-compatible server at this URL (http://HOST:PORT) "
                  "instead of a model: streaming clients, tok/s, TTFT and inter-token latency");
  cmd->add_option("--clients", a->serve.clients, "--serve: concurrent clients (default 1)");
  cmd->add_option("--prompt-tokens", a->serve.prompt_tokens,
                  "--serve: prompt token ids per request (default 128)");
  cmd->add_option("--gen-tokens", a->serve.gen_tokens,
                  "--serve: tokens each request generates, EOS ignored (default 128)");
  cmd->add_option("--shared-prefix", a->serve.shared_prefix,
                  "--serve: leading prompt tokens all requests share (default 0)");
  cmd->add_option("--requests", a->serve.requests,
                  "--serve: requests in all (default 4 per client)");
  cmd->add_option("--api-key", a->serve.api_key, "--serve: sent as 'Authorization: Bearer KEY'");
  cmd->add_option(
      "--seed", a->serve.seed,
      "--serve: seed of the prompts' token ids (default 1; another seed, other prompts)");
  cmd->add_flag("--json", a->json, "print JSON instead of a markdown table");
  cmd->add_flag("--csv", a->csv, "print CSV instead of a markdown table");
  cmd->add_flag("--keep", a->keep, "keep the synthetic model file in $TMPDIR (and reuse it)");
  cmd->callback([a, cmd, sampling_flags] {
    if (a->json && a->csv) fail("bench: choose one of --json and --csv");
    for (const char* f : sampling_flags) a->sampled = a->sampled || cmd->count(f) > 0;
    run(*a);
  });
}

HEARTH_REGISTER_COMMAND(60, setup);

}  // namespace
}  // namespace hearth::cli
