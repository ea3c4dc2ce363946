// Shared option wiring and engine loading for the CLI commands.
#include "common.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <utility>

#include "backend/gpu-backend.h"
#include "command.h"

namespace hearth::cli {

void add_runtime_options(CLI::App* cmd, RuntimeArgs* a) {
  add_model_options(cmd, &a->model);
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all cores)");
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "context size in tokens (default: model's, max 4096)");
  cmd->add_option("--gpu-layers,--n-gpu-layers,--ngl", a->gpu_layers,
                  "layers to place on the GPU: N, 'all', or 'auto' (as many as fit its free "
                  "memory) (default 0)");
  cmd->add_flag_callback(
      "--cpu-moe", [a] { a->cpu_moe = kCpuMoeAll; },
      "keep every MoE layer's router and experts on the CPU (the rest of each layer on the GPU)");
  cmd->add_option("--n-cpu-moe,--ncmoe", a->cpu_moe,
                  "keep the routers and experts of the first N MoE layers on the CPU")
      ->check(CLI::Range(0, 100000));
  cmd->add_flag("--no-cache", a->no_cache,
                "do not use or write the prepacked-weight cache ($HEARTH_CACHE_DIR or "
                "~/.cache/hearth/packed)");
  // CPU backend options (backend/cpu-options.h); ignored for layers placed on the GPU.
  cmd->add_flag_callback(
      "--no-amx", [a] { a->cpu.amx.enabled = false; },
      "CPU: run prefill matmuls with the vector kernels, never the AMX matrix engine");
  cmd->add_option("--amx-min-tokens", a->cpu.amx.min_tokens,
                  "CPU: tokens from which a prefill matmul runs on AMX, for every weight type; "
                  "0 = the measured per-type threshold (default 0)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  // A MODE flag: parse(v) or the flag's error naming its choices.
  auto add_mode = [cmd](const char* flag, const char* choices, auto parse, auto set,
                        const char* help) {
    cmd->add_option_function<std::string>(
           flag,
           [=](const std::string& v) {
             const auto mode = parse(v);
             if (!mode) fail(std::string(flag) + ": '" + v + "' is not one of " + choices);
             set(*mode);
           },
           help)
        ->type_name("MODE");
  };
  add_mode(
      "--cache-verify", "lazy, sample, full", parse_cache_verify,
      [a](CacheVerify::Mode m) { a->cpu.cache_verify = m; },
      "how a load checks the prepacked-weight cache: lazy (sampled slices now, the rest in the "
      "background), sample (sampled slices only) or full (every byte before use) (default lazy)");
  add_mode(
      "--decode-lanes", "auto, on, off", parse_lanes,
      [a](CpuOptions::Lanes l) { a->cpu.decode_lanes = l; },
      "CPU: run a decode step of several sequences as lanes, a group of sequences a thread (on), "
      "as one pass over all of them (off), or time both and keep the faster (auto) (default "
      "auto)");
  // KV cache element types (kv/kv-cache.h), llama.cpp's flags; main.cpp maps -ctk / -ctv here.
  for (const auto& flag_and_list : {std::pair{"--cache-type-k", &a->cache_types_k},
                                    std::pair{"--cache-type-v", &a->cache_types_v}}) {
    // (plain variables, not structured bindings: clang before 16, which the sanitizer build
    // uses, does not let a lambda capture those)
    const std::string name = flag_and_list.first;
    auto* const out = flag_and_list.second;
    cmd->add_option_function<std::string>(
           name,
           [name, out](const std::string& text) {
             out->clear();
             std::stringstream items(text);
             std::string v;
             while (std::getline(items, v, ',')) {
               const std::optional<DType> t = parse_kv_type(v);
               if (!t) fail(name + ": '" + v + "' is not one of " + kKvTypeChoices);
               out->push_back(*t);
             }
             if (out->empty()) fail(name + ": give a type (" + kKvTypeChoices + ")");
           },
           std::string("KV cache element type of ") + (name.back() == 'k' ? "keys" : "values") +
               ": f32, f16, bf16 or q8_0 (q8_0 needs a head size that is a multiple of 32) "
               "(default f16; also -ct" +
               name.back() + ")")
        ->type_name("TYPE");
  }
  // CUDA backend options (backend/cuda-options.h); ignored without GPU layers.
  cmd->add_flag_callback(
      "--no-cuda-graphs", [a] { a->cuda.graphs = false; },
      "GPU: launch every decode step's kernels instead of replaying a CUDA graph (also turns "
      "greedy chaining off)");
  cmd->add_option("--cuda-chain-depth", a->cuda.greedy_chain_depth,
                  "GPU, greedy decoding: steps queued ahead of the host with the argmax on the "
                  "device; 0 = off (default 3)")
      ->check(CLI::Range(0, CudaOptions::kMaxGreedyChainDepth));
  cmd->add_flag_callback(
      "--no-cuda-kv-map-ahead", [a] { a->cuda.kv_map_ahead = false; },
      "GPU: map a KV cache's device memory only as its rows are used (by default each new "
      "cache's first block is mapped ahead by a background thread)");
  cmd->add_flag("--cuda-preload-kernels,!--no-cuda-preload-kernels", a->cuda.preload_kernels,
                "GPU: load every kernel onto the device in the background once the weights are "
                "up, not at each kernel's first launch (default: on for serve, off otherwise)");
  cmd->add_flag("--cuda-f16-weights,!--no-cuda-f16-weights", a->cuda.half_weights,
                "GPU: keep an fp16 copy of each quantized matmul weight (2 bytes a weight) "
                "while an eighth of the device stays free, freed when the KV cache needs the "
                "memory: prompts and steps of more than 64 sequences run faster (default on)");
  cmd->add_flag("--cuda-gemv-ahead,!--no-cuda-gemv-ahead", a->cuda.gemv_ahead,
                "GPU: one-token Q6_K GEMVs copy their weight rows into shared memory while the "
                "kernel before them still runs (default on; off: loaded after it)");
  cmd->add_flag("--cuda-profile", a->cuda.profile,
                "GPU: print where decode steps' and prefill passes' time goes, per op family, "
                "to stderr (slower)");
  cmd->add_option("--cuda-upload-threads", a->cuda.upload_threads,
                  "GPU: host threads copying weights into pinned memory at load; 0 = min(8, "
                  "hardware threads) (default 0)")
      ->check(CLI::Range(0, CudaOptions::kMaxUploadThreads));
  cmd->add_flag("--verbose", a->verbose,
                "print where the load's time went (file, GPU start, weights, tokenizer)");
}

void print_load_phases(const Engine& engine) {
  const LoadPhases& p = engine.load_phases();
  std::fprintf(stderr,
               "hearth: load phases: open %.1f ms | gpu init %.1f ms (beside open; waited %.1f "
               "ms) | weights %.1f ms (%.2f GB, %.1f GB/s) | tokenizer %.1f ms\n",
               p.open_ms, p.gpu_init_ms, p.gpu_wait_ms, p.weights_ms, double(p.weights_bytes) / 1e9,
               p.weights_ms > 0 ? double(p.weights_bytes) / 1e6 / p.weights_ms : 0.0,
               p.tokenizer_ms);
}

void add_sampling_options(CLI::App* cmd, SamplingParams* p) {
  cmd->add_option("--temp", p->temperature, "temperature; 0 = greedy (default 0.8)");
  cmd->add_option("--top-k", p->top_k, "top-k sampling, 0 = off (default 40)");
  cmd->add_option("--top-p", p->top_p, "top-p sampling, 1 = off (default 0.95)");
  cmd->add_option("--min-p", p->min_p, "min-p sampling, 0 = off (default 0.05)");
  cmd->add_option("--repeat-penalty", p->repeat_penalty, "repetition penalty, 1 = off (default 1)");
  cmd->add_option("--repeat-last-n", p->repeat_last_n,
                  "tokens the penalty looks back (default 64)");
  cmd->add_option("--presence-penalty", p->presence_penalty, "presence penalty (default 0)");
  cmd->add_option("--frequency-penalty", p->frequency_penalty, "frequency penalty (default 0)");
  cmd->add_option("-s,--seed", p->seed, "RNG seed (default: random)");
}

int parse_gpu_layers(const std::string& v) {
  if (v == "all") return kGpuLayersAll;
  if (v == "auto") return kGpuLayersAuto;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (!end || *end || n < -1 || n > 100000)
    fail("--gpu-layers: '" + v + "' is not a number, 'auto' or 'all'");
  return int(n);
}

LoadOptions load_options(const RuntimeArgs& args) {
  LoadOptions opt;
  opt.n_threads = args.threads;
  opt.gpu_layers = parse_gpu_layers(args.gpu_layers);
  opt.cpu_moe = args.cpu_moe;
  opt.use_weight_cache = !args.no_cache;
  opt.cpu = args.cpu;
  opt.cuda = args.cuda;
  // (bench loads with its first pair; its estimate for --gpu-layers auto takes that one.)
  opt.kv_types = {args.cache_types_k.front(), args.cache_types_v.front()};
  if (opt.gpu_layers != 0 && !gpu_backend_compiled()) {
    std::fprintf(
        stderr,
        "hearth: --gpu-layers ignored: this build has no GPU support; running on the CPU\n");
    opt.gpu_layers = 0;
  }
  return opt;
}

std::shared_ptr<Engine> load_engine_or_exit(const RuntimeArgs& args, bool quiet, int kv_sequences) {
  const std::string path = check(resolve_model(args.model));
  LoadOptions opt = load_options(args);
  opt.kv_types = kv_cache_types(args);  // (one pair: exits on a list before the load)
  // 0 (the model's own context) leaves the estimate to the loader; several slots multiply it.
  if (args.ctx_size > 0) opt.ctx_hint = args.ctx_size * std::max(1, kv_sequences);
  auto engine = check(Engine::load(path, opt));
  if (!quiet)
    std::fprintf(stderr, "hearth: loaded %s (%s, %lld layers) in %.1f ms\n", path.c_str(),
                 engine->model().arch().gguf_name.c_str(),
                 (long long)engine->model().hparams().n_layer, engine->load_ms());
  if (args.verbose) print_load_phases(*engine);
  return engine;
}

KvCacheTypes kv_cache_types(const RuntimeArgs& args) {
  if (args.cache_types_k.size() != 1) fail("--cache-type-k: give one type (lists are for bench)");
  if (args.cache_types_v.size() != 1) fail("--cache-type-v: give one type (lists are for bench)");
  return {args.cache_types_k.front(), args.cache_types_v.front()};
}

int64_t context_size(const RuntimeArgs& args, const Engine& engine) {
  if (args.ctx_size > 0) return args.ctx_size;
  return std::min<int64_t>(engine.model().hparams().n_ctx_train, 4096);
}

}  // namespace hearth::cli
