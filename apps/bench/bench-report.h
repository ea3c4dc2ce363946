// The results of one `hearth bench` run and their three renderings (markdown table, JSON, CSV).
// A figure carries its roofline; a backend with its own device adds a DeviceReport line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "machine-probe.h"

namespace hearth::bench {

// One number through a printf format ("%.1f"): the reports' table cells.
std::string format_number(const char* printf_format, double v);

// Mean and sample standard deviation of repeated measurements.
struct Stat {
  double mean = 0, sd = 0;
  int n = 0;
  static Stat of(const std::vector<double>& samples);
};

struct Figure {
  std::string test;  // "pp128", "tg128", "ttft pp128", "load cold", "load warm", ...
  std::string unit;  // "tok/s" or "ms"
  Stat value;
  std::optional<double> roofline;          // best possible value in `unit` (max tok/s)
  std::string bound;                       // what sets the roofline: "bandwidth" or "compute"
  std::optional<double> joules_per_token;  // CPU package (RAPL)
  std::optional<double> gpu_joules_per_token =
      std::nullopt;  // GPU board (NVML), when layers ran on a GPU
  std::optional<double> pct_of_roofline() const {
    if (!roofline || *roofline <= 0 || unit != "tok/s") return std::nullopt;
    return 100.0 * value.mean / *roofline;
  }
};

// What a device reports about itself. The CPU's comes from machine-probe; a GPU backend adds
// its own through register_device_probe (device name, its memory bandwidth, board power).
struct DeviceReport {
  std::string backend;  // "cpu", "cuda"
  std::string name;
  double bandwidth_gbs = 0;  // measured in this run
  double peak_f32_gflops = 0, peak_int8_gops = 0, peak_amx_bf16_gflops = 0;
  std::optional<double> power_w;  // average during the runs, when the device exposes it
  std::string notes;
};

struct BenchReport {
  std::string model, model_type, kernel_isa, cold_method, cache;
  uint64_t file_bytes = 0, weight_bytes = 0, n_params = 0, kv_bytes = 0;
  uint64_t peak_rss = 0;       // warm loads and the runs
  uint64_t peak_rss_cold = 0;  // the cold load (which may pack and write the weight cache)
  int threads = 0, gpu_layers = 0;
  int depth = 0;         // tokens in the cache before each pp and tg row
  std::string sampling;  // the sampled tg row's settings; empty: greedy only
  double load_avg_1m = -1;
  std::vector<DeviceReport> devices;
  std::vector<Figure> figures;
};

std::string render_markdown(const BenchReport& r);
std::string render_json(const BenchReport& r);
std::string render_csv(const BenchReport& r);

}  // namespace hearth::bench
