// Runs `hearth bench`: machine probes, cold and warm loads, prompt processing and generation
// with repetitions, each figure next to its roofline. The CLI (apps/cli/cmd-bench.cpp) only
// parses flags into BenchOptions and prints the report.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench-report.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace hearth::bench {

struct BenchOptions {
  std::string model_path;  // a GGUF file or HF directory (already resolved)
  std::string synthetic;   // "llama2-7b:q4_0": write and bench a random-weight model instead
  std::vector<int> prompt_sizes{128};  // -p; 0 entries are skipped
  int n_gen = 128;                     // -n; 0 skips generation
  int reps = 3;
  int threads = 0;  // 0: all available cores
  int gpu_layers = 0;
  int cpu_moe = 0;               // LoadOptions::cpu_moe (--cpu-moe, --n-cpu-moe N)
  bool no_cache = false;         // bypass the prepacked-weight cache
  CpuOptions cpu;                // the CPU backend's (AMX prefill, cache verification)
  CudaOptions cuda;              // the GPU backend's (graphs, chain depth, profile)
  bool keep = false;             // keep the synthetic GGUF (and reuse it next time)
  uint64_t bandwidth_bytes = 0;  // probe buffer; 0: 2 GiB or a quarter of free memory
  int depth = 0;  // --depth: tokens already in the cache when each pp and tg row starts
  // --batch: for each B, a "tg<n> x B" row of B sequences decoded in lockstep (batch-decode.h)
  std::vector<int> batch_sizes;
  // -c/--ctx-size: the context depth + the longest test must fit (0: the model's trained
  // context); it may exceed the trained one (llama-bench's -d does), with a notice.
  int64_t ctx_size = 0;
  // KV cache element types: each pp and tg test runs once per entry, alternating within each
  // repetition; rows are named with them ("tg128 @ d1024 kv q8_0").
  std::vector<KvCacheTypes> kv_types{KvCacheTypes{}};
  // --temp/--top-k/--top-p/--min-p: a "tg sampled" row next to tg (greedy), the two run in
  // alternation; each of its tokens goes through the real Sampler (seed fixed).
  std::optional<SamplingParams> sampling;
  std::function<void(const std::string&)> progress;  // one line per stage (stderr)
};

// A backend's own device figures, added to the report when it has layers in the model
// (a GPU backend registers one; the CPU's figures come from machine-probe).
using DeviceProbe = std::function<std::optional<DeviceReport>(const Model&)>;
void register_device_probe(DeviceProbe probe);

Result<BenchReport> run_bench(const BenchOptions& options);

}  // namespace hearth::bench
