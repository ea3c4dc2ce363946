// `hearth bench --serve`: what a serving run was asked to do, what each request saw, and the
// aggregate figures serving benchmarks report (vLLM's benchmark_serving, llama.cpp's server
// bench): generation tok/s over all clients, time to first token and inter-token latency
// percentiles, request rate and failures, rendered as markdown or JSON. serve-load.cpp runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hearth::bench {

struct ServeLoadOptions {
  std::string url;      // http://HOST:PORT of an OpenAI-compatible server
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  int clients = 1;      // concurrent streaming connections
  int prompt_tokens = 128;
  int gen_tokens = 128;    // each request asks for exactly this many (ignore_eos)
  int shared_prefix = 0;   // leading prompt tokens every request has in common
  int requests = 0;        // in all; 0: four per client
  uint64_t seed = 1;       // of the prompts' token ids
  double timeout_s = 600;  // per request
  // Greedy requests (temperature 0) unless `sampled`: then these sampler fields are sent.
  bool sampled = false;
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.05f;
  int top_k = 40;
};

// One request as its client saw it. Times are seconds since the run began, latencies ms.
struct ServeRequestTrace {
  bool ok = false;
  std::string error;  // why it failed (status, transport, an error event, a short answer)
  double start_s = 0, end_s = 0;
  double ttft_ms = 0;             // request sent -> first chunk with text
  std::vector<double> itl_ms;     // gaps between successive chunks with text
  int64_t completion_tokens = 0;  // the usage chunk's count (chunks with text without one)
};

// The p-th percentile (0..100) by linear interpolation between the closest ranks (numpy's
// default, which vLLM's benchmark uses); 0 for no values.
double percentile(std::vector<double> values, double p);

struct Latency {
  double p50 = 0, p99 = 0, mean = 0, max = 0;  // max: one stall shows even among many gaps
  static Latency of(const std::vector<double>& values_ms);
};

struct ServeSummary {
  int requests = 0, failures = 0;
  int64_t completion_tokens = 0;  // of the requests that succeeded
  double wall_s = 0;              // first request sent -> last one finished
  double gen_tok_s = 0;           // completion_tokens / wall_s
  double requests_per_s = 0;
  Latency ttft, itl, e2e;  // e2e: request sent -> its last byte
  // Each request's time to first token in request order (-1 for a failed one): with one client,
  // request 0 is a prefix-cache miss and the later ones hits, which percentiles would blend.
  std::vector<double> ttft_each_ms;
  std::vector<std::string> errors;  // the first few failures' reasons
};

// Aggregates the traces (failed requests count only as failures).
ServeSummary summarize(const std::vector<ServeRequestTrace>& traces);

std::string render_serve_markdown(const ServeLoadOptions& o, const ServeSummary& s);
std::string render_serve_json(const ServeLoadOptions& o, const ServeSummary& s);

}  // namespace hearth::bench
