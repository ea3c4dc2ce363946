// Renders a BenchReport. The markdown table leads with tok/s and its roofline, like the tables
// in docs/performance.md; JSON and CSV carry the same numbers unrounded for scripts.
#include "bench-report.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace hearth::bench {

Stat Stat::of(const std::vector<double>& v) {
  Stat s;
  s.n = int(v.size());
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / double(v.size() - 1));
  }
  return s;
}

std::string format_number(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

namespace {

std::string gib(uint64_t bytes) {
  return format_number("%.2f GiB", double(bytes) / double(1ull << 30));
}

std::string opt_str(const std::optional<double>& v, const char* f) {
  return v ? format_number(f, *v) : "n/a";
}

}  // namespace

std::string render_markdown(const BenchReport& r) {
  std::string out;
  out += "model: " + r.model + " (" + r.model_type + ", " + gib(r.file_bytes) + " file, " +
         gib(r.weight_bytes) + " streamed per token, " +
         format_number("%.2f", double(r.n_params) / 1e9) + " B params)\n";
  for (const DeviceReport& d : r.devices) {
    out += d.backend + ": " + d.name;
    if (d.bandwidth_gbs > 0)
      out += "; measured read bandwidth " + format_number("%.1f", d.bandwidth_gbs) + " GB/s";
    if (d.peak_f32_gflops > 0)
      out += ", peak " + format_number("%.0f", d.peak_f32_gflops) + " GFLOP/s f32";
    if (d.peak_int8_gops > 0) out += ", " + format_number("%.0f", d.peak_int8_gops) + " GOP/s int8";
    if (d.peak_amx_bf16_gflops > 0)
      out += ", " + format_number("%.0f", d.peak_amx_bf16_gflops) + " GFLOP/s AMX bf16";
    if (d.power_w) out += ", " + format_number("%.1f W", *d.power_w);
    if (!d.notes.empty()) out += " (" + d.notes + ")";
    out += "\n";
  }
  out += "threads " + std::to_string(r.threads) + ", kernels " + r.kernel_isa + ", gpu layers " +
         std::to_string(r.gpu_layers) + ", weight cache " + r.cache + ", cold load by " +
         r.cold_method + ", load average " +
         (r.load_avg_1m >= 0 ? format_number("%.2f", r.load_avg_1m) : "n/a") + "\n";
  if (r.depth > 0 || !r.sampling.empty())
    out += "depth " + std::to_string(r.depth) + " tokens in the cache before each pp and tg" +
           (r.sampling.empty() ? std::string() : ", tg sampled with " + r.sampling) + "\n";
  out += "peak RSS " + gib(r.peak_rss) + " (file " + gib(r.file_bytes) + " + KV " +
         gib(r.kv_bytes) + "); during the cold load " + gib(r.peak_rss_cold) + "\n\n";
  const bool gpu = r.gpu_layers != 0;  // GPU runs add the board's energy per token
  out += std::string("| test | value | roofline | % of roofline | bound | J/token |") +
         (gpu ? " GPU J/token |\n" : "\n");
  out += std::string("|---|---:|---:|---:|---|---:|") + (gpu ? "---:|\n" : "\n");
  for (const Figure& f : r.figures) {
    const std::string unit = " " + f.unit;
    out += "| " + f.test + " | " + format_number("%.2f", f.value.mean) + " ± " +
           format_number("%.2f", f.value.sd) + unit + " | " +
           (f.roofline ? format_number("%.2f", *f.roofline) + unit : "") + " | " +
           (f.pct_of_roofline() ? format_number("%.0f%%", *f.pct_of_roofline()) : "") + " | " +
           f.bound + " | " + (f.unit == "tok/s" ? opt_str(f.joules_per_token, "%.3f") : "") + " |" +
           (gpu ? " " + (f.unit == "tok/s" ? opt_str(f.gpu_joules_per_token, "%.3f") : "") + " |"
                : "") +
           "\n";
  }
  return out;
}

std::string render_json(const BenchReport& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["model_type"] = r.model_type;
  j["file_bytes"] = r.file_bytes;
  j["weight_bytes_per_token"] = r.weight_bytes;
  j["n_params"] = r.n_params;
  j["threads"] = r.threads;
  j["gpu_layers"] = r.gpu_layers;
  j["kernels"] = r.kernel_isa;
  j["weight_cache"] = r.cache;
  j["cold_load_method"] = r.cold_method;
  j["load_average_1m"] = r.load_avg_1m;
  j["peak_rss_bytes"] = r.peak_rss;
  j["peak_rss_cold_load_bytes"] = r.peak_rss_cold;
  j["kv_bytes"] = r.kv_bytes;
  j["depth"] = r.depth;
  j["sampling"] = r.sampling.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.sampling);
  j["devices"] = nlohmann::json::array();
  for (const DeviceReport& d : r.devices) {
    nlohmann::json dj{{"backend", d.backend},
                      {"name", d.name},
                      {"bandwidth_gbs", d.bandwidth_gbs},
                      {"peak_f32_gflops", d.peak_f32_gflops},
                      {"peak_int8_gops", d.peak_int8_gops},
                      {"peak_amx_bf16_gflops", d.peak_amx_bf16_gflops},
                      {"notes", d.notes}};
    dj["power_w"] = d.power_w ? nlohmann::json(*d.power_w) : nlohmann::json(nullptr);
    j["devices"].push_back(dj);
  }
  j["figures"] = nlohmann::json::array();
  for (const Figure& f : r.figures) {
    nlohmann::json fj{{"test", f.test},   {"unit", f.unit}, {"mean", f.value.mean},
                      {"sd", f.value.sd}, {"n", f.value.n}, {"bound", f.bound}};
    fj["roofline"] = f.roofline ? nlohmann::json(*f.roofline) : nlohmann::json(nullptr);
    fj["pct_of_roofline"] =
        f.pct_of_roofline() ? nlohmann::json(*f.pct_of_roofline()) : nlohmann::json(nullptr);
    fj["joules_per_token"] =
        f.joules_per_token ? nlohmann::json(*f.joules_per_token) : nlohmann::json(nullptr);
    fj["gpu_joules_per_token"] =
        f.gpu_joules_per_token ? nlohmann::json(*f.gpu_joules_per_token) : nlohmann::json(nullptr);
    j["figures"].push_back(fj);
  }
  return j.dump(2) + "\n";
}

std::string render_csv(const BenchReport& r) {
  std::string out =
      "model,type,threads,kernels,test,unit,mean,sd,n,roofline,pct_of_roofline,bound,"
      "joules_per_token,bandwidth_gbs,peak_rss_bytes,load_average_1m,gpu_joules_per_token\n";
  const double bw = r.devices.empty() ? 0 : r.devices.front().bandwidth_gbs;
  for (const Figure& f : r.figures) {
    out += r.model + "," + r.model_type + "," + std::to_string(r.threads) + "," + r.kernel_isa +
           "," + f.test + "," + f.unit + "," + format_number("%.4f", f.value.mean) + "," +
           format_number("%.4f", f.value.sd) + "," + std::to_string(f.value.n) + "," +
           opt_str(f.roofline, "%.4f") + "," + opt_str(f.pct_of_roofline(), "%.2f") + "," +
           f.bound + "," + opt_str(f.joules_per_token, "%.5f") + "," + format_number("%.2f", bw) +
           "," + std::to_string(r.peak_rss) + "," + format_number("%.2f", r.load_avg_1m) + "," +
           opt_str(f.gpu_joules_per_token, "%.5f") + "\n";
  }
  return out;
}

}  // namespace hearth::bench
