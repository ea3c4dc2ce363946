// Options and helpers shared by the model-running commands (run, logits, chat, bench, serve):
// threads, context, GPU layers, sampling flags with llama.cpp's names, and engine loading.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model-arg.h"
#include "runtime/engine.h"
#include "sampling/sampler.h"

namespace hearth::cli {

struct RuntimeArgs {
  ModelArg model;
  int threads = 0;               // -t; 0 = all cores
  int64_t ctx_size = 0;          // -c; 0 = min(training context, 4096)
  std::string gpu_layers = "0";  // -ngl N | auto | all
  int cpu_moe = 0;               // --cpu-moe (kCpuMoeAll) | --n-cpu-moe N (LoadOptions::cpu_moe)
  bool no_cache = false;         // --no-cache: do not use or write the prepacked-weight cache
  CpuOptions cpu;                // --no-amx, --amx-min-tokens, --cache-verify
  CudaOptions cuda;              // --no-cuda-graphs, --cuda-chain-depth, --cuda-profile, ...
  // --cache-type-k/-ctk, --cache-type-v/-ctv: one type each (bench: comma-separated lists).
  std::vector<DType> cache_types_k{DType::F16}, cache_types_v{DType::F16};
  bool verbose = false;  // --verbose: where the load's (and, for run, start-up's) time went
};

// The K/V cache types the flags name; exits with a one-line error when a flag lists several
// (only `bench` takes lists).
KvCacheTypes kv_cache_types(const RuntimeArgs& args);

void add_runtime_options(CLI::App* cmd, RuntimeArgs* args);
// One stderr line: the engine's load phases (--verbose).
void print_load_phases(const Engine& engine);
void add_sampling_options(CLI::App* cmd, SamplingParams* params);

// Loads the model named by args (resolving repo ids), printing one error line and exiting on
// failure. `quiet` suppresses the load line on stderr.
// kv_sequences: how many sequences of the context size will hold KV at once (serve's slots),
// for --gpu-layers auto's memory estimate.
std::shared_ptr<Engine> load_engine_or_exit(const RuntimeArgs& args, bool quiet = false,
                                            int kv_sequences = 1);
// --gpu-layers: N, "all" (kGpuLayersAll) or "auto" (kGpuLayersAuto); exits on anything else.
int parse_gpu_layers(const std::string& v);
// The runtime flags as load options (what load_engine_or_exit and `bench` load with).
LoadOptions load_options(const RuntimeArgs& args);
int64_t context_size(const RuntimeArgs& args, const Engine& engine);

}  // namespace hearth::cli
