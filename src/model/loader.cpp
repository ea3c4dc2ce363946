// load_model: reads hyper-parameters and weights from a GGUF file or a Hugging Face directory,
// checks every tensor's presence, shape and type, and places layer groups on backends.
#include <algorithm>
#include <future>
#include <map>
#include <optional>

#include "backend/cpu-backend.h"
#include "backend/gpu-backend.h"
#include "base/file-readahead.h"
#include "base/mapped-file.h"
#include "base/thread-pool.h"
#include "base/timer.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "formats/safetensors.h"
#include "model/arch-read.h"
#include "model/model.h"
#include "model/tensor-names.h"
#include "model/weight-source.h"
#include "model/weight-transcode.h"

namespace hearth {

class ModelBuilder {
 public:
  static void adopt_spec(Model& m, ModelSpec spec) {
    m.arch_ = spec.arch;
    m.hp_ = std::move(spec.hp);
    m.rope_ = std::move(spec.rope);
    m.rope_style_ = spec.rope_style;
    m.rope_partial_ = m.hp_.n_rot != m.hp_.head_dim;
    for (const RopeTable& t : m.rope_)
      m.rope_partial_ = m.rope_partial_ || t.mscale != 1.0f || t.mscale_long != 1.0f;
  }

  // Q/K/V (or gate/up) from their own tensors, or as row views of the fused one.
  static Status take_split(const Source& src, int64_t l, TensorRole fused, int64_t cols,
                           std::initializer_list<std::pair<TensorRole, int64_t>> parts,
                           std::initializer_list<Weight*> outs) {
    // Fused when the first part has no tensor of its own and the fused one exists (llama.cpp
    // names Phi-3's gate/up "ffn_up", the up part's own name: ffn_gate's absence decides).
    const TensorView* first = src.find(src.name(parts.begin()->first, l));
    const TensorView* whole = first ? nullptr : src.find(src.name(fused, l));
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    if (whole) {
      if (whole->shape != std::vector<int64_t>{rows, cols})
        return Status::error("tensor " + whole->name + " has shape " + shape_string(whole->shape) +
                             ", expected " + shape_string({rows, cols}) +
                             " (the fused parts' rows)");
      if (!dtype_info(whole->dtype).runnable)
        return Status::error(std::string("unsupported tensor type ") + dtype_name(whole->dtype) +
                             " (" + whole->name + ")");
      int64_t row0 = 0;
      auto out = outs.begin();
      for (const auto& p : parts) {
        TensorView v = *whole;
        v.name = whole->name + "#" + std::to_string(row0);  // unique: the weight cache's key
        v.shape = {p.second, cols};
        v.data = whole->row(row0);
        v.nbytes = uint64_t(p.second) * whole->row_stride_bytes();
        (*out)->host = v;
        row0 += p.second;
        ++out;
      }
      return Status::ok();
    }
    auto out = outs.begin();
    for (const auto& p : parts) {
      HEARTH_ASSIGN_OR_RETURN(**out, take_weight(src.find, src.name(p.first, l), {p.second, cols}));
      ++out;
    }
    return Status::ok();
  }

  static Status take_weights(Model& m, const Source& src) {
    HParams& hp = m.hp_;
    const TensorView* emb = src.find(src.name(TensorRole::kTokenEmbedding, -1));
    if (!emb) return Status::error("missing tensor " + src.name(TensorRole::kTokenEmbedding, -1));
    if (emb->shape.size() != 2 || emb->shape[1] != hp.n_embd)
      return Status::error("tensor " + emb->name + " has shape " + shape_string(emb->shape) +
                           ", expected [n_vocab, " + std::to_string(hp.n_embd) + "]");
    if (hp.n_vocab == 0) hp.n_vocab = emb->shape[0];
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, HD = hp.head_dim;
    const int64_t QD = hp.q_dim(), KVD = hp.kv_dim();
    auto W = [&](TensorRole r, int64_t l, std::vector<int64_t> shape, bool required = true) {
      return take_weight(src.find, src.name(r, l), shape, required);
    };
    HEARTH_ASSIGN_OR_RETURN(m.tok_embd_, W(TensorRole::kTokenEmbedding, -1, {V, E}));
    HEARTH_ASSIGN_OR_RETURN(m.output_norm_src_, W(TensorRole::kOutputNorm, -1, {E}));
    HEARTH_ASSIGN_OR_RETURN(m.output_, W(TensorRole::kOutput, -1, {V, E}, false));
    if (!m.output_) {
      // The LM head reads the embedding table as a matrix: under its own name the CPU backend
      // packs it for its GEMM/GEMV kernels (and caches that copy apart) while the embedding keeps
      // the file's layout for row gathers. Left as the table, every token's largest matmul ran
      // the unpacked dequantize-and-dot path (half a kjv-13m decode step).
      m.output_ = m.tok_embd_;
      m.output_.host.name = "tied-lm-head:" + m.tok_embd_.host.name;
      hp.tied_embeddings = true;
    }
    const bool sandwich = hp.norms == NormPlacement::kSandwich;
    m.layers_.resize(size_t(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      LayerWeights& lw = m.layers_[size_t(l)];
      HEARTH_ASSIGN_OR_RETURN(lw.attn_norm_src, W(TensorRole::kAttnNorm, l, {E}));
      HEARTH_TRY(take_split(
          src, l, TensorRole::kAttnQkv, E,
          {{TensorRole::kAttnQ, QD}, {TensorRole::kAttnK, KVD}, {TensorRole::kAttnV, KVD}},
          {&lw.wq, &lw.wk, &lw.wv}));
      HEARTH_ASSIGN_OR_RETURN(lw.wo, W(TensorRole::kAttnOut, l, {E, QD}));
      const bool bias = m.arch_->qkv_bias;
      HEARTH_ASSIGN_OR_RETURN(lw.bq, W(TensorRole::kAttnQBias, l, {QD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.bk, W(TensorRole::kAttnKBias, l, {KVD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.bv, W(TensorRole::kAttnVBias, l, {KVD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.bo, W(TensorRole::kAttnOutBias, l, {E}, m.arch_->attn_out_bias));
      HEARTH_ASSIGN_OR_RETURN(lw.sinks_src,
                              W(TensorRole::kAttnSinks, l, {hp.n_head}, m.arch_->attn_sinks));
      if (!m.arch_->attn_out_bias) lw.bo = {};
      if (!m.arch_->attn_sinks) lw.sinks_src = {};
      HEARTH_ASSIGN_OR_RETURN(lw.q_norm_src, W(TensorRole::kAttnQNorm, l, {HD}, hp.qk_norm));
      HEARTH_ASSIGN_OR_RETURN(lw.k_norm_src, W(TensorRole::kAttnKNorm, l, {HD}, hp.qk_norm));
      HEARTH_ASSIGN_OR_RETURN(lw.post_attn_norm_src,
                              W(TensorRole::kAttnPostNorm, l, {E}, sandwich));
      HEARTH_ASSIGN_OR_RETURN(lw.ffn_norm_src, W(TensorRole::kFfnNorm, l, {E}));
      if (hp.is_moe_layer(l)) {
        HEARTH_TRY(take_moe_layer(*m.arch_, hp, src, l, lw, m.owned_));
      } else {
        HEARTH_TRY(take_split(src, l, TensorRole::kFfnGateUp, E,
                              {{TensorRole::kFfnGate, F}, {TensorRole::kFfnUp, F}},
                              {&lw.w_gate, &lw.w_up}));
        HEARTH_ASSIGN_OR_RETURN(lw.w_down, W(TensorRole::kFfnDown, l, {E, F}));
      }
      HEARTH_ASSIGN_OR_RETURN(lw.post_ffn_norm_src, W(TensorRole::kFfnPostNorm, l, {E}, sandwich));
      // Only sandwich families have post-norms: llama.cpp's gpt-oss files name their FFN
      // pre-norm "post_attention_norm", which must not be read as one.
      if (!sandwich) lw.post_attn_norm_src = lw.post_ffn_norm_src = {};
    }
    return Status::ok();
  }

  // A norm vector in backend memory; HF's Gemma weights w become llama.cpp's 1 + w.
  static Result<float*> prepare_norm(const Model& m, Backend& be, const Weight& w) {
    if (!w) return static_cast<float*>(nullptr);
    if (!m.plus_one_norms_) return be.prepare_vector(w.host);
    std::vector<float> v(size_t(w.host.numel()));
    kernels::dequantize_row(w.host.dtype, w.host.data, v.data(), w.host.numel());
    for (float& x : v) x += 1.0f;
    TensorView t = w.host;
    t.dtype = DType::F32;
    t.data = v.data();
    t.nbytes = v.size() * sizeof(float);
    return be.prepare_vector(t);
  }

  // The GPU backend, made on a thread of its own: a CUDA context, cuBLAS and the pinned
  // staging take a few hundred milliseconds of a fresh process, which the caller spends
  // mapping and checking the file (and, cold, the disk reading ahead) meanwhile.
  struct GpuStart {
    std::unique_ptr<Backend> backend;
    std::string error;
    double ms = 0;
  };
  static std::future<GpuStart> start_gpu(const CudaOptions& cuda) {
    return std::async(std::launch::async, [cuda] {
      Timer t;
      GpuStart g;
      auto made = make_gpu_backend(0, cuda);
      if (made.is_ok())
        g.backend = std::move(made).value();
      else
        g.error = made.message();
      g.ms = t.elapsed_ms();
      return g;
    });
  }
  // How the GPU backend must work for this model: a GPU layer with CPU experts crosses to the
  // host mid-step, so its steps run eagerly. Before the metadata is read, only a load without
  // --cpu-moe knows this (early_gpu).
  static CudaOptions gpu_options(const LoadOptions& opt, int64_t n_expert) {
    CudaOptions cuda = opt.cuda;
    if (opt.cpu_moe != 0 && n_expert > 0) cuda.graphs = false;
    return cuda;
  }
  // A GPU backend started before the file is opened (the usual case), or none yet.
  static std::future<GpuStart> early_gpu(const LoadOptions& opt) {
    if (opt.gpu_layers == 0 || opt.cpu_moe != 0) return {};
    return start_gpu(gpu_options(opt, 0));
  }

  // Places layers on the plan of backend/placement.h: the first gpu_layers on the GPU backend
  // (when asked, made and able to run the model's blocks), the rest on the CPU. The LM head
  // goes with the last layer's group; the embedding with the first. gpu_start: the GPU
  // backend early_gpu started, if it did.
  static Status place(Model& m, const LoadOptions& opt, std::future<GpuStart> gpu_start) {
    if (const std::string bad = cpu_options_error(opt.cpu); !bad.empty())
      return Status::error("CPU options: " + bad);
    const int threads = opt.n_threads > 0 ? opt.n_threads : available_cpu_count();
    std::unique_ptr<Backend> gpu;
    std::string gpu_error;
    if (requested_gpu_layers(opt.gpu_layers, m.hp_.n_layer) > 0) {
      if (!gpu_start.valid()) gpu_start = start_gpu(gpu_options(opt, m.hp_.n_expert));
      Timer wait;
      GpuStart g = gpu_start.get();
      m.phases_.gpu_wait_ms = wait.elapsed_ms();
      m.phases_.gpu_init_ms = g.ms;
      gpu = std::move(g.backend);
      gpu_error = std::move(g.error);
    }
    GpuCandidate candidate;
    if (gpu) candidate = {gpu->name(), gpu->features()};
    const LayerPlacement plan =
        place_layers(opt.gpu_layers, m.hp_.n_layer, m.needed_features(), gpu ? &candidate : nullptr,
                     gpu_error, [&] { return gpu_layer_costs(m, *gpu, opt); });
    if (!plan.gpu_refused.empty()) log_gpu_fallback(plan.gpu_refused);
    if (!plan.auto_note.empty()) std::fprintf(stderr, "hearth: %s\n", plan.auto_note.c_str());
    const int64_t gpu_layers = plan.gpu_layers;
    Backend* gpu_backend = nullptr;
    if (gpu_layers > 0) {
      m.backends_.push_back(std::move(gpu));
      gpu_backend = m.backends_.back().get();
    }
    Backend* cpu = nullptr;
    bool cpu_experts = false;  // a GPU layer's experts stay on the CPU (--cpu-moe)
    for (int64_t l = 0; l < gpu_layers; ++l)
      cpu_experts = cpu_experts || (m.hp_.is_moe_layer(l) && experts_on_cpu(opt.cpu_moe, l));
    if (gpu_layers < m.hp_.n_layer || cpu_experts) {
      CpuBackendOptions cpu_opt;
      cpu_opt.n_threads = threads;
      cpu_opt.use_weight_cache = opt.use_weight_cache;
      cpu_opt.cpu = opt.cpu;
      if (m.gguf_ && m.gguf_->mapped()) {  // HF directories (several shards) are not cached
        cpu_opt.source_identity = m.gguf_->mapped()->identity();
        cpu_opt.source_label = m.path_;
      }
      m.backends_.push_back(make_cpu_backend(cpu_opt));
      cpu = m.backends_.back().get();
    }
    // One backend per group here, each with its decode loop.
    for (const auto& be : m.backends_) m.decode_loops_.push_back(std::make_unique<DecodeLoop>(*be));
    size_t next_loop = 0;
    if (gpu_layers > 0)
      m.groups_.push_back({0, gpu_layers, gpu_backend, m.decode_loops_[next_loop++].get()});
    if (gpu_layers < m.hp_.n_layer)
      m.groups_.push_back({gpu_layers, m.hp_.n_layer, cpu, m.decode_loops_[next_loop++].get()});

    m.expert_backends_.assign(size_t(m.hp_.n_layer), nullptr);
    for (const auto& g : m.groups_)
      for (int64_t l = g.first; l < g.last; ++l)
        m.expert_backends_[size_t(l)] =
            g.backend == gpu_backend && m.hp_.is_moe_layer(l) && experts_on_cpu(opt.cpu_moe, l)
                ? cpu
                : g.backend;

    // Every backend's batch ends before this returns, also after an error: weights still on
    // their way must land before the model (and their memory) can go.
    Timer weights;
    for (const auto& be : m.backends_) be->begin_loading_weights();
    Status loaded = prepare_weights(m, opt);
    for (const auto& be : m.backends_) {
      const Status st = be->finish_loading_weights();
      if (loaded.is_ok()) loaded = st;
    }
    HEARTH_TRY(loaded);
    m.phases_.weights_ms = weights.elapsed_ms();
    if (opt.progress && !opt.progress(1.0f)) return Status::error("load cancelled");
    return Status::ok();
  }

  // Every weight and vector onto its group's backend (progress after each layer is queued).
  static Status prepare_weights(Model& m, const LoadOptions& opt) {
    const size_t total = m.layers_.size() + 2;
    size_t done = 0;
    auto progress = [&]() -> Status {
      ++done;
      if (opt.progress && !opt.progress(float(done) / float(total)))
        return Status::error("load cancelled");
      return Status::ok();
    };
    auto prepare = [&m](Backend& be, Weight& w) {
      m.phases_.weights_bytes += w.host.nbytes;
      return be.prepare_weight(w);
    };
    Backend* first = m.groups_.front().backend;
    Backend* last = m.groups_.back().backend;
    HEARTH_TRY(prepare(*first, m.tok_embd_));
    HEARTH_TRY(prepare(*last, m.output_));
    HEARTH_ASSIGN_OR_RETURN(m.output_norm_, prepare_norm(m, *last, m.output_norm_src_));
    HEARTH_TRY(progress());
    for (const auto& g : m.groups_) {
      for (int64_t l = g.first; l < g.last; ++l) {
        LayerWeights& lw = m.layers_[size_t(l)];
        for (Weight* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
          if (*w) HEARTH_TRY(prepare(*g.backend, *w));
        Backend& xb = *m.expert_backends_[size_t(l)];
        if (lw.router) HEARTH_TRY(prepare(xb, lw.router));
        for (auto* experts : {&lw.exp_gate, &lw.exp_up, &lw.exp_down})
          for (Weight& w : *experts) HEARTH_TRY(prepare(xb, w));
        Backend& be = *g.backend;
        HEARTH_ASSIGN_OR_RETURN(lw.attn_norm, prepare_norm(m, be, lw.attn_norm_src));
        HEARTH_ASSIGN_OR_RETURN(lw.ffn_norm, prepare_norm(m, be, lw.ffn_norm_src));
        HEARTH_ASSIGN_OR_RETURN(lw.post_attn_norm, prepare_norm(m, be, lw.post_attn_norm_src));
        HEARTH_ASSIGN_OR_RETURN(lw.post_ffn_norm, prepare_norm(m, be, lw.post_ffn_norm_src));
        HEARTH_ASSIGN_OR_RETURN(lw.q_norm, prepare_norm(m, be, lw.q_norm_src));
        HEARTH_ASSIGN_OR_RETURN(lw.k_norm, prepare_norm(m, be, lw.k_norm_src));
        if (lw.bq) {
          HEARTH_ASSIGN_OR_RETURN(lw.q_bias, g.backend->prepare_vector(lw.bq.host));
          HEARTH_ASSIGN_OR_RETURN(lw.k_bias, g.backend->prepare_vector(lw.bk.host));
          HEARTH_ASSIGN_OR_RETURN(lw.v_bias, g.backend->prepare_vector(lw.bv.host));
        }
        HEARTH_TRY(prepare_gpt_oss_vectors(lw, be, xb));
        HEARTH_TRY(progress());
      }
    }
    return Status::ok();
  }

  static void log_gpu_fallback(const std::string& why);

  // gpt-oss's vectors in backend memory: O bias and sinks on the layer's backend, router and
  // expert biases (when present) on its experts' (xb).
  static Status prepare_gpt_oss_vectors(LayerWeights& lw, Backend& be, Backend& xb) {
    auto vec_on = [&](Backend& on, const Weight& w, float** out) -> Status {
      if (!w) return Status::ok();
      HEARTH_ASSIGN_OR_RETURN(*out, on.prepare_vector(w.host));
      return Status::ok();
    };
    auto vec = [&](const Weight& w, float** out) { return vec_on(xb, w, out); };
    HEARTH_TRY(vec_on(be, lw.bo, &lw.o_bias));
    HEARTH_TRY(vec_on(be, lw.sinks_src, &lw.sinks));
    HEARTH_TRY(vec(lw.router_bias_src, &lw.router_bias));
    const std::pair<const std::vector<Weight>*, std::vector<float*>*> lists[] = {
        {&lw.exp_gate_bias_src, &lw.exp_gate_bias},
        {&lw.exp_up_bias_src, &lw.exp_up_bias},
        {&lw.exp_down_bias_src, &lw.exp_down_bias}};
    for (const auto& [src, dst] : lists) {
      dst->assign(src->size(), nullptr);
      for (size_t e = 0; e < src->size(); ++e) HEARTH_TRY(vec((*src)[e], &(*dst)[e]));
    }
    return Status::ok();
  }

  // --gpu-layers auto's inputs: the GPU's free memory, what one layer's weights and KV rows (at
  // the context the caller will use) take there, and the fixed part: the embedding, the LM head
  // and a reserve for activations and library workspaces.
  static GpuLayerCosts gpu_layer_costs(const Model& m, Backend& gpu, const LoadOptions& opt) {
    GpuLayerCosts c;
    c.free_bytes = gpu.device_memory_free();
    if (!c.free_bytes) return c;
    const auto& hp = m.hp_;
    c.ctx = opt.ctx_hint > 0 ? opt.ctx_hint
                             : std::min<int64_t>(hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096, 4096);
    const KvCacheTypes on_gpu{gpu.supports_kv_type(opt.kv_types.k) ? opt.kv_types.k : DType::F32,
                              gpu.supports_kv_type(opt.kv_types.v) ? opt.kv_types.v : DType::F32};
    c.per_layer_bytes = uint64_t(c.ctx) * KvCache::bytes_per_position(hp.kv_dim(), on_gpu);
    // The largest layer as placed: an MoE layer's router and experts count unless they stay on
    // the CPU (--cpu-moe), and the first layer may be a dense one of a sparse model.
    uint64_t largest = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l)
      largest = std::max(largest, m.layer_weight_bytes(l, !experts_on_cpu(opt.cpu_moe, l),
                                                       [&gpu](const TensorView& t) {
                                                         return gpu.device_weight_bytes(t);
                                                       }));
    c.per_layer_bytes += largest;
    // Activations of a 512-token pass (forward.cpp's scratch) plus ~1 GiB for cuBLAS workspaces,
    // the decode graph and fragmentation.
    const uint64_t scratch =
        uint64_t(512) *
        uint64_t(4 * hp.n_embd + 2 * hp.q_dim() + 2 * hp.kv_dim() + 2 * hp.n_ff + hp.n_vocab) *
        sizeof(float);
    // MoE layers' grouped path: 512 * n_expert_used rows of x, gate, up and the experts' output.
    const uint64_t moe_scratch = hp.n_expert > 0
                                     ? uint64_t(512) * uint64_t(hp.n_expert_used) *
                                           uint64_t(2 * hp.n_embd + 2 * hp.n_ff_exp) * sizeof(float)
                                     : 0;
    c.fixed_bytes = moe_scratch + gpu.device_weight_bytes(m.tok_embd_.host) +
                    gpu.device_weight_bytes(m.output_.host) + scratch + (1ull << 30);
    return c;
  }

  static Result<std::shared_ptr<Model>> load_gguf(const std::string& path, const LoadOptions& opt) {
    Timer open;
    std::future<GpuStart> gpu = early_gpu(opt);
    HEARTH_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
    std::shared_ptr<Model> m(new Model());
    m->path_ = path;
    m->format_ = "gguf";
    m->gguf_ = std::make_shared<GgufFile>(std::move(f));
    const GgufFile& g = *m->gguf_;
    auto spec_read = read_gguf_spec(g);
    if (!spec_read.is_ok()) return spec_read.status().with_context(path);
    ModelSpec spec = std::move(spec_read).value();
    HEARTH_TRY(check_model_spec(spec).with_context(path));
    adopt_spec(*m, std::move(spec));
    const ArchSpec& arch = *m->arch_;
    Transcoded transcoded;
    Source src{[&g, &m, &transcoded](const std::string& n) { return transcoded.find(g, n, *m); },
               [&arch](TensorRole r, int64_t l) { return gguf_tensor_name(arch, r, l); }, nullptr};
    // With every layer on the GPU each weight is read from the file once, in file order: the
    // disk may run ahead of the upload. (CPU layers read the weight cache, not the file, when
    // it holds them.) Declared after m: it stops before the file it reads can go.
    std::optional<FileReadahead> readahead;
    if (g.mapped() && gpu_backend_compiled() && opt.cpu_moe == 0 &&
        opt.gpu_layers != kGpuLayersAuto &&
        requested_gpu_layers(opt.gpu_layers, m->hp_.n_layer) >= m->hp_.n_layer)
      readahead.emplace(*g.mapped());
    HEARTH_TRY(take_weights(*m, src).with_context(path));
    transcoded.report();
    m->phases_.open_ms = open.elapsed_ms();
    HEARTH_TRY(place(*m, opt, std::move(gpu)).with_context(path));
    return m;
  }

  // A GGUF's tensors as the loader sees them: a tensor whose type has no kernels but whose
  // values another type holds exactly (model/weight-transcode.h: Q3_K as Q6_K) is rewritten on
  // its first lookup into a buffer the model owns; the rest are the file's views.
  class Transcoded {
   public:
    const TensorView* find(const GgufFile& g, const std::string& name, Model& m) {
      const TensorView* t = g.find_tensor(name);
      if (!t) return nullptr;
      const std::optional<DType> to = transcode_target(t->dtype);
      if (!to) return t;
      if (auto it = views_.find(name); it != views_.end()) return &it->second;
      const DTypeInfo& from_info = dtype_info(t->dtype);
      const uint64_t blocks = t->nbytes / from_info.block_bytes;
      std::vector<uint8_t>& buf = m.owned_.emplace_back(blocks * dtype_info(*to).block_bytes);
      transcode(t->dtype, t->data, buf.data(), int64_t(blocks));
      TensorView v = *t;
      v.dtype = *to;
      v.data = buf.data();
      v.nbytes = buf.size();
      from_bytes_ += t->nbytes;
      to_bytes_ += v.nbytes;
      return &views_.emplace(name, std::move(v)).first->second;
    }
    void report() const {
      if (views_.empty()) return;
      std::fprintf(stderr,
                   "hearth: %zu Q3_K tensors run as Q6_K, which holds their values exactly "
                   "(%.1f MiB in the file, %.1f MiB loaded)\n",
                   views_.size(), double(from_bytes_) / (1 << 20), double(to_bytes_) / (1 << 20));
    }

   private:
    std::map<std::string, TensorView> views_;
    uint64_t from_bytes_ = 0, to_bytes_ = 0;
  };

  static Result<std::shared_ptr<Model>> load_hf(const std::string& dir, const LoadOptions& opt) {
    Timer open;
    std::future<GpuStart> gpu = early_gpu(opt);
    const std::string config_path = dir + "/config.json";
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path));
    HEARTH_ASSIGN_OR_RETURN(HfConfig config, parse_hf_config(text, config_path));
    HEARTH_ASSIGN_OR_RETURN(SafetensorsCheckpoint ck, SafetensorsCheckpoint::open_dir(dir));
    if (!config.text_of.empty()) HEARTH_TRY(ck.keep_language_model(config.text_of, dir));
    std::shared_ptr<Model> m(new Model());
    m->path_ = dir;
    m->format_ = "safetensors";
    m->st_ = std::make_shared<SafetensorsCheckpoint>(std::move(ck));
    auto spec_read = read_hf_spec(config);
    if (!spec_read.is_ok()) return spec_read.status().with_context(config_path);
    ModelSpec spec = std::move(spec_read).value();
    HEARTH_TRY(check_model_spec(spec).with_context(config_path));
    adopt_spec(*m, std::move(spec));
    m->plus_one_norms_ = m->arch_->norm_plus_one;  // HF stores w; the norm is (1 + w)
    const SafetensorsCheckpoint& st = *m->st_;
    const NormPlacement norms = m->hp_.norms;
    const ArchSpec& arch = *m->arch_;
    Source src{
        [&st](const std::string& n) { return n.empty() ? nullptr : st.find_tensor(n); },
        [norms, &arch](TensorRole r, int64_t l) {
          return r == TensorRole::kFfnGateInp || r == TensorRole::kFfnGateInpBias
                     ? hf_moe_tensor_name(arch, r, l)
                     : hf_tensor_name(r, l, norms);
        },
        [&arch](TensorRole r, int64_t l, int64_t e) { return hf_moe_tensor_name(arch, r, l, e); }};
    HEARTH_TRY(take_weights(*m, src).with_context(dir));
    m->phases_.open_ms = open.elapsed_ms();
    HEARTH_TRY(place(*m, opt, std::move(gpu)).with_context(dir));
    return m;
  }
};

void ModelBuilder::log_gpu_fallback(const std::string& why) {
  std::fprintf(stderr, "hearth: --gpu-layers ignored, running on the CPU: %s\n", why.c_str());
}

Result<std::shared_ptr<Model>> load_model(const std::string& path, const LoadOptions& options) {
  if (is_directory(path)) return ModelBuilder::load_hf(path, options);
  if (!file_exists(path)) return Status::error(path + ": no such file or directory");
  return ModelBuilder::load_gguf(path, options);
}

Model::~Model() = default;

std::vector<Backend*> Model::layer_backends() const {
  std::vector<Backend*> out(static_cast<size_t>(hp_.n_layer));
  for (const auto& g : groups_)
    for (int64_t l = g.first; l < g.last; ++l) out[size_t(l)] = g.backend;
  return out;
}

std::shared_ptr<KvPool> Model::kv_pool(int64_t total_tokens, const KvCacheTypes& types) const {
  std::vector<KvPool::Buffer> buffers;
  for (Backend* b : layer_backends())
    for (DType t : {b->supports_kv_type(types.k) ? types.k : DType::F32,
                    b->supports_kv_type(types.v) ? types.v : DType::F32})
      buffers.push_back(
          {b->commit_granularity(), uint64_t(kernels::kv_row_bytes(t, hp_.kv_dim()))});
  return KvPool::create(total_tokens, KvPool::block_tokens_for(buffers));
}

Result<KvCache> Model::new_kv_cache(int64_t n_ctx, const KvCacheTypes& types,
                                    std::shared_ptr<KvPool> pool) const {
  for (const auto& [what, t] : {std::pair{"K", types.k}, std::pair{"V", types.v}})
    if (t == DType::Q8_0 && hp_.head_dim % 32 != 0)
      return Status::error(std::string("KV cache: ") + what +
                           " type q8_0 needs a head_dim that is a multiple of 32; this model's "
                           "is " +
                           std::to_string(hp_.head_dim));
  std::vector<int64_t> windows;
  for (const auto& l : hp_.layers) windows.push_back(l.window);
  return KvCache::create(layer_backends(), n_ctx, hp_.kv_dim(), windows, kMaxTokensPerPass, types,
                         std::move(pool));
}

uint32_t Model::needed_features() const {
  uint32_t f = 0;
  if (hp_.qk_norm) f |= Backend::kQkNorm;
  if (hp_.activation != FfnActivation::kSilu) f |= Backend::kGeluGated;
  if (hp_.attn_softcap > 0 || hp_.any_sliding()) f |= Backend::kMaskedAttention;
  if (rope_partial_) f |= Backend::kPartialRope;
  if (hp_.embed_scale > 0 || hp_.final_softcap > 0) f |= Backend::kScaleOps;
  if (hp_.n_expert > 0) f |= Backend::kMoe;
  if (hp_.activation == FfnActivation::kSwigluClamped) f |= Backend::kClampedSwiglu;
  for (const auto& l : layers_)
    if (l.sinks_src) f |= Backend::kAttentionSinks;
  return f;
}

uint64_t Model::weight_bytes() const {
  // An MoE layer streams its router and, per token, n_expert_used of its experts: counted as
  // that share of the experts' bytes (a decode step's average).
  uint64_t total = output_.host.nbytes;
  for (const auto& l : layers_) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router})
      total += w->host.nbytes;
    uint64_t experts = 0;
    for (const auto* list : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (const Weight& w : *list) experts += w.host.nbytes;
    if (hp_.n_expert > 0) total += experts * uint64_t(hp_.n_expert_used) / uint64_t(hp_.n_expert);
  }
  return total;
}

uint64_t Model::layer_weight_bytes(int64_t l, bool experts,
                                   const std::function<uint64_t(const TensorView&)>& bytes) const {
  const LayerWeights& lw = layers_[size_t(l)];
  uint64_t total = 0;
  for (const Weight* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
    if (*w) total += bytes(w->host);
  if (!experts) return total;
  if (lw.router) total += bytes(lw.router.host);
  for (const auto* list : {&lw.exp_gate, &lw.exp_up, &lw.exp_down})
    for (const Weight& w : *list) total += bytes(w.host);
  return total;
}

std::vector<std::pair<std::string, int>> Model::weight_type_counts() const {
  std::map<std::string, int> counts;
  auto add = [&](const Weight& w) {
    if (w) counts[dtype_name(w.host.dtype)]++;
  };
  add(tok_embd_);
  if (!hp_.tied_embeddings) add(output_);
  add(output_norm_src_);
  for (const auto& l : layers_)
    for (const Weight* w : {&l.attn_norm_src,
                            &l.ffn_norm_src,
                            &l.post_attn_norm_src,
                            &l.post_ffn_norm_src,
                            &l.q_norm_src,
                            &l.k_norm_src,
                            &l.wq,
                            &l.wk,
                            &l.wv,
                            &l.wo,
                            &l.bq,
                            &l.bk,
                            &l.bv,
                            &l.bo,
                            &l.sinks_src,
                            &l.w_gate,
                            &l.w_up,
                            &l.w_down,
                            &l.router,
                            &l.router_bias_src})
      add(*w);
  for (const auto& l : layers_)
    for (const auto* list : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (const Weight& w : *list) add(w);
  return {counts.begin(), counts.end()};
}

}  // namespace hearth
