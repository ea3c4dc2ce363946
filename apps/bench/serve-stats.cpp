// serve-stats.h: percentiles, the summary of a serving run's traces, and its two renderings.
#include "serve-stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench-report.h"

namespace hearth::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

Latency Latency::of(const std::vector<double>& v) {
  Latency l;
  if (v.empty()) return l;
  l.p50 = percentile(v, 50);
  l.p99 = percentile(v, 99);
  l.max = *std::max_element(v.begin(), v.end());
  for (double x : v) l.mean += x;
  l.mean /= double(v.size());
  return l;
}

ServeSummary summarize(const std::vector<ServeRequestTrace>& traces) {
  ServeSummary s;
  s.requests = int(traces.size());
  std::vector<double> ttft, itl, e2e;
  double first = 0, last = 0;
  bool any = false;
  for (const auto& t : traces) {
    first = any ? std::min(first, t.start_s) : t.start_s;
    last = any ? std::max(last, t.end_s) : t.end_s;
    any = true;
    s.ttft_each_ms.push_back(t.ok ? t.ttft_ms : -1.0);
    if (!t.ok) {
      s.failures++;
      if (s.errors.size() < 5) s.errors.push_back(t.error);
      continue;
    }
    s.completion_tokens += t.completion_tokens;
    ttft.push_back(t.ttft_ms);
    itl.insert(itl.end(), t.itl_ms.begin(), t.itl_ms.end());
    e2e.push_back((t.end_s - t.start_s) * 1000.0);
  }
  s.wall_s = last - first;
  if (s.wall_s > 0) {
    s.gen_tok_s = double(s.completion_tokens) / s.wall_s;
    s.requests_per_s = double(s.requests - s.failures) / s.wall_s;
  }
  s.ttft = Latency::of(ttft);
  s.itl = Latency::of(itl);
  s.e2e = Latency::of(e2e);
  return s;
}

namespace {

std::string latency_row(const char* name, const Latency& l) {
  return std::string("| ") + name + " | " + format_number("%.1f", l.p50) + " | " +
         format_number("%.1f", l.p99) + " | " + format_number("%.1f", l.mean) + " | " +
         format_number("%.1f", l.max) + " |\n";
}

nlohmann::json latency_json(const Latency& l) {
  return {{"p50", l.p50}, {"p99", l.p99}, {"mean", l.mean}, {"max", l.max}};
}

}  // namespace

std::string render_serve_markdown(const ServeLoadOptions& o, const ServeSummary& s) {
  std::string out;
  out += "serve: " + o.url + ", " + std::to_string(o.clients) + " streaming clients, " +
         std::to_string(s.requests) + " requests of " + std::to_string(o.prompt_tokens) +
         " prompt tokens (" + std::to_string(o.shared_prefix) + " shared) and " +
         std::to_string(o.gen_tokens) + " generated\n\n";
  out += "| figure | value |\n|---|---|\n";
  out += "| generation (all clients) | " + format_number("%.1f tok/s", s.gen_tok_s) + " |\n";
  out += "| requests | " + std::to_string(s.requests - s.failures) + " ok, " +
         std::to_string(s.failures) + " failed, " + format_number("%.2f/s", s.requests_per_s) +
         " |\n";
  out += "| tokens generated | " + std::to_string(s.completion_tokens) + " in " +
         format_number("%.2f s", s.wall_s) + " |\n\n";
  out += "| latency (ms) | p50 | p99 | mean | max |\n|---|---|---|---|---|\n";
  out += latency_row("time to first token", s.ttft);
  out += latency_row("inter-token", s.itl);
  out += latency_row("request", s.e2e);
  for (const auto& e : s.errors) out += "failed: " + e + "\n";
  return out;
}

std::string render_serve_json(const ServeLoadOptions& o, const ServeSummary& s) {
  nlohmann::json j = {{"mode", "serve"},
                      {"url", o.url},
                      {"clients", o.clients},
                      {"prompt_tokens", o.prompt_tokens},
                      {"gen_tokens", o.gen_tokens},
                      {"shared_prefix", o.shared_prefix},
                      {"temperature", o.sampled ? o.temperature : 0.0f},
                      {"requests", s.requests},
                      {"failures", s.failures},
                      {"completion_tokens", s.completion_tokens},
                      {"wall_s", s.wall_s},
                      {"gen_tok_s", s.gen_tok_s},
                      {"requests_per_s", s.requests_per_s},
                      {"ttft_ms", latency_json(s.ttft)},
                      {"itl_ms", latency_json(s.itl)},
                      {"e2e_ms", latency_json(s.e2e)},
                      {"ttft_each_ms", s.ttft_each_ms},
                      {"errors", s.errors}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace hearth::bench
