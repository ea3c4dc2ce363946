// The bench sequence: probe the machine, (write the synthetic model,) cold load, warm loads,
// warm-ups, then timed prompt processing and generation. Every tok/s figure gets a roofline:
// decode is bound by bytes streamed per token / measured bandwidth, prefill by FLOPs / peak.
#include "bench-runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "backend/weight-cache.h"
#include "base/cpu-features.h"
#include "base/mapped-file.h"
#include "base/thread-pool.h"
#include "batch-decode.h"
#include "kernels/cpu/kernel-table.h"
#include "nvml-probe.h"
#include "runtime/generation-step.h"
#include "synthetic-model.h"

namespace hearth::bench {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::mutex& probes_mutex() {
  static std::mutex m;
  return m;
}
std::vector<DeviceProbe>& probes() {
  static std::vector<DeviceProbe> p;
  return p;
}

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

double load_average() {
  double l[1];
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// Weights in the matrices (embedding included) and the FLOPs of one prefill pass of P tokens.
struct Shape {
  HParams hp;
  double layer_params() const {
    const double E = double(hp.n_embd), QD = double(hp.q_dim()), KVD = double(hp.kv_dim());
    return E * QD + 2 * E * KVD + QD * E + ffn_params();
  }
  // A layer's FFN matrices, averaged over the layers; an MoE layer counts its router and the
  // experts one token goes through.
  double ffn_params() const {
    const double E = double(hp.n_embd);
    if (hp.n_expert == 0) return 3 * E * double(hp.n_ff);
    double sum = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l)
      sum += hp.is_moe_layer(l)
                 ? 3 * E * double(hp.n_ff_exp * hp.n_expert_used) + E * double(hp.n_expert)
                 : 3 * E * double(hp.n_ff);
    return sum / double(hp.n_layer);
  }
  double params() const {
    const double head = double(hp.n_vocab) * double(hp.n_embd);
    return double(hp.n_layer) * layer_params() + head * (hp.tied_embeddings ? 1 : 2);
  }
  // Matmuls for every token, the LM head for the last one, attention (QK^T and PV) of each
  // token over the D cached ones before the prompt and the causal prompt itself.
  double prefill_flops(int64_t P, int64_t D = 0) const {
    const double p = double(P), d = double(D);
    return 2 * p * double(hp.n_layer) * layer_params() +
           2 * double(hp.n_vocab) * double(hp.n_embd) +
           double(hp.n_layer) * 4 * double(hp.q_dim()) * (p * d + p * (p + 1) / 2);
  }
};

// Bytes of K and V (every layer) one cached position holds, whatever the cache's element type.
double kv_bytes_per_position(const KvCache& kv) {
  return kv.capacity() > 0 ? double(kv.bytes()) / double(kv.capacity()) : 0.0;
}

// "temp 0.8 top-k 0 top-p 0.95 min-p 0.05": the settings a sampled row ran with.
std::string describe(const SamplingParams& p) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "temp %g top-k %d top-p %g min-p %g", double(p.temperature),
                int(p.top_k), double(p.top_p), double(p.min_p));
  return buf;
}

// The most common matrix type (what sets the kernels' precision and speed).
DType main_weight_type(const Model& m) {
  DType best = DType::F32;
  int best_n = -1;
  for (const auto& [name, n] : m.weight_type_counts()) {
    for (uint32_t id = 0; id < uint32_t(kernels::kMaxTypeId); ++id) {
      const DTypeInfo* info = dtype_info(id);
      if (!info || name != info->name || info->dtype == DType::F32) continue;
      if (n > best_n) {
        best = info->dtype;
        best_n = n;
      }
    }
  }
  return best;
}

struct Timed {
  std::shared_ptr<Model> model;
  double ms = 0;
};

Result<Timed> timed_load(const std::string& path, const LoadOptions& opt) {
  const auto t0 = Clock::now();
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<Model> m, load_model(path, opt));
  return Timed{m, ms_since(t0)};
}

int argmax(const std::vector<float>& v) {
  return greedy_argmax(v.data(), int64_t(v.size()));
}

// GPU board energy (NVML) summed over every measured run, for the GPU's average power.
struct GpuMeter {
  bool on = false;  // the model has layers on a GPU
  double joules = 0, seconds = 0;
  bool complete = true;  // every run had a reading
};

struct Measured {
  std::vector<double> tok_s;
  std::optional<double> jpt;      // CPU package energy (RAPL) per token
  std::optional<double> gpu_jpt;  // GPU board energy (NVML) per token
};

// Runs `body` reps times, each timed and metered; returns tok/s samples and J/token.
template <class Body>
Result<Measured> measure(int reps, int64_t tokens, GpuMeter& gpu, Body body) {
  Measured out;
  double joules = 0, gpu_joules = 0;
  bool have_energy = true, have_gpu = gpu.on;
  const NvmlProbe* nvml = gpu.on ? &NvmlProbe::instance() : nullptr;
  for (int r = 0; r < reps; ++r) {
    const EnergyReading e0 = read_energy();
    const double g0 = nvml ? nvml->energy_j().value_or(-1.0) : -1.0;
    const auto t0 = Clock::now();
    HEARTH_TRY(body());
    const double ms = ms_since(t0);
    const auto de = energy_delta_j(e0, read_energy());
    const double g1 = nvml ? nvml->energy_j().value_or(-1.0) : -1.0;
    if (de)
      joules += *de;
    else
      have_energy = false;
    // The board counter updates every few tens of ms: a run it did not see tick (a 512-token
    // prefill takes ~25 ms on an H200) leaves its figure without a reading (not zero joules),
    // and stays out of the average power, which the runs it did see still give.
    if (g0 >= 0 && g1 > g0) {
      gpu_joules += g1 - g0;
      gpu.joules += g1 - g0;
      gpu.seconds += ms / 1000.0;
    } else if (gpu.on) {
      have_gpu = false;
      if (g0 < 0 || g1 < g0) gpu.complete = false;  // the counter failed or went back
    }
    out.tok_s.push_back(double(tokens) * 1000.0 / ms);
  }
  if (have_energy && reps > 0) out.jpt = joules / double(reps) / double(tokens);
  if (have_gpu && reps > 0) out.gpu_jpt = gpu_joules / double(reps) / double(tokens);
  return out;
}

// Appends one repetition's figures to the ones collected so far (rows measured in alternation).
void append(Measured& all, const Measured& one, int reps_so_far) {
  all.tok_s.insert(all.tok_s.end(), one.tok_s.begin(), one.tok_s.end());
  auto average = [&](std::optional<double>& a, const std::optional<double>& b) {
    a = a && b ? std::optional<double>((*a * reps_so_far + *b) / (reps_so_far + 1)) : std::nullopt;
  };
  if (reps_so_far == 0) {
    all.jpt = one.jpt;
    all.gpu_jpt = one.gpu_jpt;
  } else {
    average(all.jpt, one.jpt);
    average(all.gpu_jpt, one.gpu_jpt);
  }
}

}  // namespace

void register_device_probe(DeviceProbe probe) {
  std::lock_guard<std::mutex> lock(probes_mutex());
  probes().push_back(std::move(probe));
}

Result<BenchReport> run_bench(const BenchOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  if (o.reps < 1) return Status::error("bench: -r must be at least 1");
  if (o.n_gen < 0) return Status::error("bench: -n must not be negative");
  if (o.depth < 0) return Status::error("bench: --depth must not be negative");
  for (int p : o.prompt_sizes)
    if (p < 0) return Status::error("bench: -p sizes must not be negative");
  BenchReport rep;
  rep.threads = o.threads > 0 ? o.threads : available_cpu_count();
  rep.gpu_layers = o.gpu_layers;
  rep.depth = o.depth;
  if (o.sampling) rep.sampling = describe(*o.sampling);
  rep.kernel_isa = kernels::active_kernel_table().name;
  rep.cache = o.no_cache ? "off" : "on (" + weight_cache_dir() + ")";

  // The model file: given, or a synthetic one written now (reused with --keep).
  std::string path = o.model_path;
  bool delete_after = false;
  if (!o.synthetic.empty()) {
    HEARTH_ASSIGN_OR_RETURN(SyntheticSpec spec, parse_synthetic(o.synthetic));
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = tmp && *tmp ? tmp : "/tmp";
    std::string name = "hearth-bench-" + spec.shape.name + "-" + synthetic_type_name(spec);
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    // A private name unless kept (then the next --keep run reuses the file).
    std::string suffix;
    if (!o.keep) {
      suffix = "-";
      suffix += std::to_string(::getpid());
    }
    path = dir + "/" + name + suffix + ".gguf";
    if (!(o.keep && file_exists(path))) {
      say("writing synthetic model " + path);
      HEARTH_ASSIGN_OR_RETURN(uint64_t bytes, write_synthetic_gguf(spec, path));
      (void)bytes;
    }
    delete_after = !o.keep;
    rep.model = "synthetic " + spec.shape.name;
  }
  if (path.empty()) return Status::error("bench: give a model with -m or --synthetic");
  struct Cleanup {
    std::string path;
    bool on;
    ~Cleanup() {
      if (on) std::filesystem::remove(path);
    }
  } cleanup{path, delete_after};
  if (rep.model.empty()) rep.model = std::filesystem::path(path).filename().string();
  {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(path, ec))
        if (e.is_regular_file(ec)) rep.file_bytes += e.file_size(ec);
    } else {
      rep.file_bytes = std::filesystem::file_size(path, ec);
    }
  }

  // The machine, measured now so the rooflines match this run's conditions.
  say("measuring memory bandwidth and peak compute");
  uint64_t probe_bytes = o.bandwidth_bytes;
  if (probe_bytes == 0)
    probe_bytes =
        std::min<uint64_t>(2ull << 30, std::max<uint64_t>(256u << 20, mem_available_bytes() / 4));
  DeviceReport cpu;
  cpu.backend = "cpu";
  cpu.name = cpu_model_name() + " (" + cpu_features().summary() + ")";
  cpu.bandwidth_gbs = measure_read_bandwidth(rep.threads, probe_bytes);
  const PeakCompute peak = measure_peak_compute(rep.threads, rep.kernel_isa);
  cpu.peak_f32_gflops = peak.f32_gflops;
  cpu.peak_int8_gops = peak.int8_gops;
  cpu.peak_amx_bf16_gflops = peak.amx_bf16_gflops;
  cpu.notes = std::to_string(rep.threads) + " threads, " + std::to_string(probe_bytes >> 20) +
              " MiB read buffer on 2 MiB pages, best of 1 and 4 streams a thread";
  const bool rapl = read_energy().joules.has_value();
  if (!rapl) cpu.notes += ", no readable RAPL";
  reset_peak_rss();  // the probe buffer and synthetic writer are not the model's footprint

  LoadOptions lo;
  lo.n_threads = rep.threads;
  lo.gpu_layers = o.gpu_layers;
  lo.cpu_moe = o.cpu_moe;
  // The KV run() sizes (the largest prompt + generation), for --gpu-layers auto.
  lo.ctx_hint = int64_t(o.depth) + o.n_gen + 8;
  for (int p : o.prompt_sizes)
    lo.ctx_hint = std::max<int64_t>(lo.ctx_hint, int64_t(o.depth) + p + o.n_gen + 8);
  lo.use_weight_cache = !o.no_cache;
  lo.cpu = o.cpu;
  lo.cuda = o.cuda;

  // Cold load: the file (and its prepacked cache) out of the page cache first.
  say("cold load");
  rep.cold_method = drop_file_cache(path);
  for (const std::string& f : weight_cache_files())
    if (drop_file_cache(f) == "none") rep.cold_method += " (cache file kept)";
  // Load, then a one-token prompt: its pass reads every weight once, which a mapped load
  // leaves for the first token. Returns the load's ms and the load + first token's.
  auto load_and_first_token =
      [&](std::shared_ptr<Model>* kept) -> Result<std::pair<double, double>> {
    HEARTH_ASSIGN_OR_RETURN(Timed t, timed_load(path, lo));
    const auto t0 = Clock::now();
    HEARTH_ASSIGN_OR_RETURN(KvCache kv, t.model->new_kv_cache(16));
    ForwardScratch scratch;
    std::vector<float> logits;
    HEARTH_TRY(t.model->prefill(kv, {1}, scratch, &logits));
    (void)argmax(logits);
    const double first = t.ms + ms_since(t0);
    if (kept) *kept = std::move(t.model);
    return std::make_pair(t.ms, first);
  };
  std::vector<Figure> loads;
  {
    // The first token too, so the cold figures include reading every weight from disk and the
    // warm runs below find all of it in the page cache (a mapped load alone touches little).
    HEARTH_ASSIGN_OR_RETURN(auto cold, load_and_first_token(nullptr));
    loads.push_back({"load cold", "ms", Stat::of({cold.first}), std::nullopt, rep.cold_method, {}});
    loads.push_back({"cold load + first token",
                     "ms",
                     Stat::of({cold.second}),
                     std::nullopt,
                     rep.cold_method,
                     {}});
  }
  // A cold load may pack and write the cache (a one-time cost): its peak is reported apart.
  rep.peak_rss_cold = peak_rss_bytes();
  reset_peak_rss();
  // Warm loads, each followed by its first token (a one-token prompt).
  say("warm loads");
  std::vector<double> warm, first_token;
  std::shared_ptr<Model> model;
  for (int r = 0; r < o.reps; ++r) {
    model.reset();
    HEARTH_ASSIGN_OR_RETURN(auto w, load_and_first_token(&model));
    warm.push_back(w.first);
    first_token.push_back(w.second);
  }
  loads.push_back({"load warm", "ms", Stat::of(warm), std::nullopt, "", {}});
  loads.push_back({"warm load + first token", "ms", Stat::of(first_token), std::nullopt, "", {}});

  const Shape shape{model->hparams()};
  const DType wtype = main_weight_type(*model);
  rep.model_type = dtype_name(wtype);
  rep.weight_bytes = model->weight_bytes();
  rep.n_params = uint64_t(shape.params());
  // Prefill runs int8 kernels when the weight type quantizes activations (its packed layout's
  // type where it has one), at half their rate for int16 activations (Q8_0's vpdpwssd, Q6_K's
  // two byte products), f32 FMAs otherwise; from prefill_min_tokens on, the AMX bf16 GEMM where
  // this CPU has one (its peak is halved for types it runs as two products, hi + lo weights).
  const kernels::KernelTable& table = kernels::active_kernel_table();
  const kernels::TypeKernels& kernels_of = table.of(wtype);
  const DType act = kernels_of.packed ? kernels_of.packed->act_type : kernels_of.act_type;
  const bool int8 = act != DType::F32 && peak.int8_gops > 0;
  const bool int16 = int8 && act == DType::I16;
  auto prefill_peak = [&](int p) -> std::pair<double, const char*> {
    const auto amx = kernels::choose_prefill_gemm(table, wtype, p, o.cpu.amx);
    if (amx && peak.amx_bf16_gflops > 0 && o.gpu_layers == 0) {
      const bool split = amx->precision == kernels::PrefillPrecision::kSplitWeights;
      return {peak.amx_bf16_gflops / (split ? 2 : 1), "compute (amx bf16)"};
    }
    if (int16) return {peak.int8_gops / 2, "compute (int16)"};
    return int8 ? std::pair{peak.int8_gops, "compute (int8)"}
                : std::pair{peak.f32_gflops, "compute (f32)"};
  };

  int max_p = 0;
  for (int p : o.prompt_sizes) max_p = std::max(max_p, p);
  // The longest row: depth, then the largest prompt or the one-token prompt and generation.
  const int64_t longest = int64_t(o.depth) + std::max<int64_t>(max_p, 1 + int64_t(o.n_gen));
  const int64_t trained = model->hparams().n_ctx_train;
  const int64_t n_ctx = o.ctx_size > 0 ? o.ctx_size : trained;
  if (o.ctx_size > 0 && trained > 0 && o.ctx_size > trained)
    say("notice: --ctx-size " + std::to_string(o.ctx_size) +
        " exceeds the model's trained context of " + std::to_string(trained) +
        " tokens (positions past it are outside what it was trained on)");
  if (o.depth > 0 && n_ctx > 0 && longest > n_ctx)
    return Status::error("bench: --depth " + std::to_string(o.depth) + " plus the longest test (" +
                         std::to_string(longest - o.depth) + " tokens) exceeds the " +
                         (o.ctx_size > 0 ? "context (--ctx-size) of " : "model's context of ") +
                         std::to_string(n_ctx) + " tokens (-c/--ctx-size sets a larger one)");
  if (o.kv_types.empty()) return Status::error("bench: no KV cache types to run");
  // One cache per KV type; every test runs on each, alternating within a repetition so drift
  // (heat, other load) spreads over all of them.
  struct TypedCache {
    KvCache kv;
    std::string label;  // " kv f16", " kv q8_0/f16" (K/V)
  };
  std::vector<TypedCache> caches;
  for (const KvCacheTypes& t : o.kv_types) {
    HEARTH_ASSIGN_OR_RETURN(KvCache kv,
                            model->new_kv_cache(int64_t(max_p) + o.n_gen + 8 + o.depth, t));
    std::string label = std::string(" kv ") + kv_type_name(t.k);
    if (t.v != t.k) label += std::string("/") + kv_type_name(t.v);
    caches.push_back({std::move(kv), label});
  }
  rep.kv_bytes = caches.front().kv.bytes();
  ForwardScratch scratch;
  std::vector<float> logits;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(1, int32_t(model->hparams().n_vocab - 1));
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = tok(rng);
    return t;
  };

  say("warm-up");
  // The largest prompt first, so one-time costs (scratch growth, GEMM library setup, per-weight
  // device copies made at the first prefill) land here and not in the first timed repetition;
  // then every other prompt size once, since a backend may choose its kernels by a pass's size
  // (the CUDA prefill GEMMs an algorithm per power-of-two bucket of tokens: pp200's first pass
  // took about twice its repeat's time on the H200 when only pp512 had warmed up).
  std::vector<int> warm_sizes{std::max(1, max_p)};
  for (int p : o.prompt_sizes)
    if (p > 0 && std::find(warm_sizes.begin(), warm_sizes.end(), p) == warm_sizes.end())
      warm_sizes.push_back(p);
  const std::vector<int32_t> depth_tokens = tokens(o.depth);
  for (TypedCache& c : caches) {
    for (int p : warm_sizes) {
      c.kv.set_used(0);
      HEARTH_TRY(model->prefill(c.kv, tokens(p), scratch, &logits));
    }
    for (int i = 0; i < 4 && o.n_gen > 0; ++i) HEARTH_TRY(model->decode(c.kv, 1, scratch, &logits));
    // The depth's tokens, once: every row starts at kv.set_used(depth) and writes only after it.
    if (o.depth > 0) {
      say("filling " + std::to_string(o.depth) + " tokens of depth" + c.label);
      c.kv.set_used(0);
      for (int done = 0; done < o.depth;) {
        const int chunk = std::min(512, o.depth - done);
        const std::vector<int32_t> part(depth_tokens.begin() + done,
                                        depth_tokens.begin() + done + chunk);
        HEARTH_TRY(model->prefill(c.kv, part, scratch, &logits));
        done += chunk;
      }
    }
  }
  const int64_t depth = o.depth;
  const std::string at_depth = depth > 0 ? " @ d" + std::to_string(depth) : "";

  // Decode reads each layer group's weights from its backend's memory: the roofline's time per
  // token is the sum over groups of (their share of the bytes / that memory's bandwidth), the
  // GPU's measured now by its backend. The GPU's share: its layers' active bytes (an MoE layer's
  // router and n_expert_used experts count where --cpu-moe / --n-cpu-moe put them).
  double gpu_bw = 0, gpu_share = 0;
  const Backend* gpu_backend = nullptr;
  for (const LayerGroup& g : model->groups())
    if (auto bw = g.backend->measure_read_bandwidth_gbs()) gpu_bw = *bw, gpu_backend = g.backend;
  if (gpu_backend) {
    const HParams& hp = model->hparams();
    const auto nbytes = [](const TensorView& t) { return t.nbytes; };
    const std::vector<Backend*> where = model->layer_backends();
    double on_gpu = 0, all = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      const double dense = double(model->layer_weight_bytes(l, false, nbytes));
      double experts = double(model->layer_weight_bytes(l, true, nbytes)) - dense;
      if (hp.n_expert > 0) experts = experts * double(hp.n_expert_used) / double(hp.n_expert);
      on_gpu += (where[size_t(l)] == gpu_backend ? dense : 0) +
                (model->expert_backend(l) == gpu_backend ? experts : 0);
      all += dense + experts;
    }
    gpu_share = all > 0 ? on_gpu / all : 0;
  }
  auto bandwidth_roofline = [&](double bytes, double tokens) {
    const double s = bytes * (1 - gpu_share) / (cpu.bandwidth_gbs * 1e9) +
                     (gpu_share > 0 ? bytes * gpu_share / (gpu_bw * 1e9) : 0.0);
    return tokens / s;
  };

  std::vector<Figure> figs;
  GpuMeter gpu;
  gpu.on = o.gpu_layers != 0;
  for (int p : o.prompt_sizes) {
    if (p == 0) continue;
    say("pp" + std::to_string(p) + at_depth);
    const std::vector<int32_t> prompt = tokens(p);
    std::vector<Measured> m(caches.size());
    std::vector<std::vector<double>> ttft(caches.size());
    for (int r = 0; r < o.reps; ++r) {
      for (size_t i = 0; i < caches.size(); ++i) {
        KvCache& kv = caches[i].kv;
        HEARTH_ASSIGN_OR_RETURN(Measured one, measure(1, p, gpu, [&]() -> Status {
                                  kv.set_used(depth);
                                  const auto t0 = Clock::now();
                                  HEARTH_TRY(model->prefill(kv, prompt, scratch, &logits));
                                  (void)argmax(logits);
                                  ttft[i].push_back(ms_since(t0));
                                  return Status::ok();
                                }));
        append(m[i], one, r);
      }
    }
    const auto [peak_gops, compute_bound] = prefill_peak(p);
    const double compute_max = peak_gops * 1e9 / (shape.prefill_flops(p, depth) / p);
    for (size_t i = 0; i < caches.size(); ++i) {
      // The weights once and the cache it attends to (depth and the prompt's own rows).
      const double kv_row = kv_bytes_per_position(caches[i].kv);
      const double bw_max =
          bandwidth_roofline(double(rep.weight_bytes) + kv_row * double(depth + p), p);
      const std::string name = "pp" + std::to_string(p) + at_depth + caches[i].label;
      // The GPU's matrix peak is not probed: with layers there, no prefill roofline is claimed.
      Figure f{name,
               "tok/s",
               Stat::of(m[i].tok_s),
               gpu_share > 0 ? std::nullopt : std::optional<double>(std::min(compute_max, bw_max)),
               gpu_share > 0           ? "n/a (GPU peak not probed)"
               : compute_max <= bw_max ? compute_bound
                                       : "bandwidth",
               m[i].jpt,
               m[i].gpu_jpt};
      figs.push_back(f);
      figs.push_back({"ttft " + name, "ms", Stat::of(ttft[i]), std::nullopt, "", {}});
    }
  }
  if (o.n_gen > 0) {
    const std::string tg = "tg" + std::to_string(o.n_gen);
    say(tg + at_depth + (o.sampling ? " greedy and sampled, alternating" : ""));
    // A chained run must produce every token the row times.
    auto all_generated = [&](const Result<GreedyRun>& run) -> Status {
      HEARTH_TRY(run.status());
      if (run->steps != o.n_gen)
        return Status::error("bench: generation stopped after " + std::to_string(run->steps) +
                             " tokens");
      return Status::ok();
    };
    // Greedy through Model::decode_greedy, as generation runs it: on a backend that chains
    // steps (CUDA) the argmax stays on the device and the host queues steps ahead.
    auto greedy = [&](KvCache& kv) -> Status {
      kv.set_used(depth);
      HEARTH_TRY(model->prefill(kv, {1}, scratch, &logits));
      return all_generated(
          model->decode_greedy(kv, 1, o.n_gen, scratch, [](int32_t) { return true; }));
    };
    // Sampled as Session::generate runs it: the first token from the host sampler, then the
    // device's draws inside the chain where the backend samples (CUDA), else decode + the
    // sampler over the logits and the history. One sampler for every repetition (its buffers
    // grow once, as in a session).
    std::optional<Sampler> sampler;
    std::vector<int32_t> history;
    if (o.sampling) {
      SamplingParams sp = *o.sampling;
      sp.seed = 42;
      sampler.emplace(sp);
      history.reserve(size_t(o.n_gen) + 1);
    }
    const int32_t n_vocab = int32_t(model->hparams().n_vocab);
    auto sampled = [&](KvCache& kv) -> Status {
      kv.set_used(depth);
      history.assign(1, 1);
      HEARTH_TRY(model->prefill(kv, {1}, scratch, &logits));
      const int32_t first = sampler->sample(logits.data(), n_vocab, history);
      history.push_back(first);
      const Backend::PickRule rule = device_pick_rule(sampler->params(), sampler->seed());
      if (model->can_chain(rule, int64_t(history.size()))) {
        return all_generated(model->decode_chained(kv, first, o.n_gen, scratch, rule, history,
                                                   [](int32_t) { return true; }));
      }
      HEARTH_TRY(model->decode(kv, first, scratch, &logits));
      for (int i = 1; i < o.n_gen; ++i) {
        const int32_t token = sampler->sample(logits.data(), n_vocab, history);
        history.push_back(token);
        HEARTH_TRY(model->decode(kv, token, scratch, &logits));
      }
      return Status::ok();
    };
    std::vector<Measured> mg(caches.size()), ms(caches.size());
    for (int r = 0; r < o.reps; ++r) {
      for (size_t i = 0; i < caches.size(); ++i) {
        KvCache& kv = caches[i].kv;
        HEARTH_ASSIGN_OR_RETURN(Measured one,
                                measure(1, o.n_gen, gpu, [&]() { return greedy(kv); }));
        append(mg[i], one, r);
        if (!sampler) continue;
        HEARTH_ASSIGN_OR_RETURN(Measured two,
                                measure(1, o.n_gen, gpu, [&]() { return sampled(kv); }));
        append(ms[i], two, r);
      }
    }
    for (size_t i = 0; i < caches.size(); ++i) {
      // Weights once per token, and the cache rows it attends to (depth + the mean position).
      const double kv_row = kv_bytes_per_position(caches[i].kv);
      const double bytes = double(rep.weight_bytes) + kv_row * (double(depth) + 1 + o.n_gen / 2.0);
      figs.push_back({tg + at_depth + caches[i].label, "tok/s", Stat::of(mg[i].tok_s),
                      bandwidth_roofline(bytes, 1), "bandwidth", mg[i].jpt, mg[i].gpu_jpt});
      if (sampler)
        figs.push_back({tg + " sampled" + at_depth + caches[i].label, "tok/s",
                        Stat::of(ms[i].tok_s), bandwidth_roofline(bytes, 1), "bandwidth", ms[i].jpt,
                        ms[i].gpu_jpt});
    }
  }
  for (int B : o.batch_sizes) {
    if (B <= 0 || o.n_gen <= 0) continue;
    const std::string name = "tg" + std::to_string(o.n_gen) + " x " + std::to_string(B);
    say(name + at_depth + " (lockstep, aggregate)");
    // The first cache types listed (the default f16 unless -ctk/-ctv say otherwise), each
    // sequence holding a copy of the filled depth.
    HEARTH_ASSIGN_OR_RETURN(std::vector<KvCache> batch,
                            new_batch_caches(*model, B, int64_t(max_p) + o.n_gen + 8 + depth,
                                             o.kv_types.front(), caches.front().kv, depth));
    HEARTH_TRY(batch_decode_tok_s(*model, batch, 2, depth, scratch).status());  // warm-up
    Measured mb;
    for (int r = 0; r < o.reps; ++r) {
      HEARTH_ASSIGN_OR_RETURN(double tok_s,
                              batch_decode_tok_s(*model, batch, o.n_gen, depth, scratch));
      mb.tok_s.push_back(tok_s);
    }
    // Weights once per step for B tokens (the cache rows are not counted here).
    figs.push_back({name + at_depth,
                    "tok/s",
                    Stat::of(mb.tok_s),
                    bandwidth_roofline(double(rep.weight_bytes), B),
                    "bandwidth",
                    {},
                    {}});
  }
  figs.insert(figs.end(), loads.begin(), loads.end());
  rep.figures = figs;
  rep.peak_rss = peak_rss_bytes();
  rep.devices.push_back(cpu);
  if (gpu.on) {
    // NVML's view of the GPU: average board power over the measured runs ("n/a" without it).
    const NvmlProbe& nvml = NvmlProbe::instance();
    DeviceReport g;
    g.backend = "gpu";
    g.name = nvml.available() ? nvml.name() : "n/a";
    if (gpu.seconds > 0 && gpu.complete) g.power_w = gpu.joules / gpu.seconds;
    g.bandwidth_gbs = gpu_bw;
    g.notes = nvml.available() ? (g.power_w ? "NVML board energy" : "NVML energy counter n/a")
                               : "NVML n/a: " + nvml.why_unavailable();
    if (const auto used = nvml.memory_used_bytes())
      g.notes += ", " + std::to_string(*used >> 20) + " MiB of device memory in use (NVML)";
    rep.devices.push_back(g);
  }
  {
    std::lock_guard<std::mutex> lock(probes_mutex());
    for (const DeviceProbe& p : probes())
      if (auto d = p(*model)) rep.devices.push_back(*d);
  }
  rep.load_avg_1m = load_average();
  return rep;
}

}  // namespace hearth::bench
