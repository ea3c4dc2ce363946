// load_model: reads hyper-parameters and weights from a GGUF file or a Hugging Face directory,
// checks every tensor's presence, shape and type, and places layer groups on backends.
#include <algorithm>
#include <map>

#include "backend/cpu-backend.h"
#include "backend/gpu-backend.h"
#include "base/mapped-file.h"
#include "base/thread-pool.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model/tensor-names.h"

namespace hearth {

namespace {

using FindTensor = std::function<const TensorView*(const std::string&)>;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Looks up a tensor and checks its shape and that Hearth can compute with its type.
Result<Weight> take_weight(const FindTensor& find, const std::string& name,
                           const std::vector<int64_t>& shape, bool required = true) {
  const TensorView* t = find(name);
  if (!t) {
    if (!required) return Weight{};
    return Status::error("missing tensor " + name);
  }
  if (t->shape != shape)
    return Status::error("tensor " + name + " has shape " + shape_string(t->shape) + ", expected " +
                         shape_string(shape));
  if (!dtype_info(t->dtype).runnable)
    return Status::error(std::string("unsupported tensor type ") + dtype_name(t->dtype) + " (" +
                         name + ")");
  Weight w;
  w.host = *t;
  return w;
}

struct Source {
  FindTensor find;
  std::function<std::string(TensorRole, int64_t)> name;
};

}  // namespace

class ModelBuilder {
 public:
  static Status read_gguf_hparams(Model& m, const GgufFile& f) {
    HEARTH_ASSIGN_OR_RETURN(auto arch_name, f.get_string("general.architecture"));
    if (!arch_name) return Status::error("missing key general.architecture");
    m.arch_ = find_arch_by_gguf_name(*arch_name);
    if (!m.arch_)
      return Status::error("unknown architecture '" + *arch_name +
                           "' (general.architecture); supported: " + join(known_arch_names()));
    const std::string a = *arch_name + ".";
    auto need_int = [&](const std::string& key, int64_t* out) -> Status {
      HEARTH_ASSIGN_OR_RETURN(auto v, f.get_int(a + key));
      if (!v) return Status::error("missing key " + a + key);
      if (*v <= 0 || *v > (int64_t(1) << 31))
        return Status::error("key " + a + key + " has invalid value " + std::to_string(*v));
      *out = *v;
      return Status::ok();
    };
    HParams& hp = m.hp_;
    HEARTH_TRY(need_int("embedding_length", &hp.n_embd));
    HEARTH_TRY(need_int("block_count", &hp.n_layer));
    HEARTH_TRY(need_int("feed_forward_length", &hp.n_ff));
    HEARTH_TRY(need_int("attention.head_count", &hp.n_head));
    HEARTH_ASSIGN_OR_RETURN(auto kv, f.get_int(a + "attention.head_count_kv"));
    hp.n_head_kv = kv ? *kv : hp.n_head;
    HEARTH_ASSIGN_OR_RETURN(auto ctx, f.get_int(a + "context_length"));
    hp.n_ctx_train = ctx ? *ctx : 2048;
    HEARTH_ASSIGN_OR_RETURN(auto key_len, f.get_int(a + "attention.key_length"));
    hp.head_dim = key_len ? *key_len : (hp.n_embd / hp.n_head);
    HEARTH_ASSIGN_OR_RETURN(auto eps, f.get_float(a + "attention.layer_norm_rms_epsilon"));
    hp.rms_eps = float(eps ? *eps : m.arch_->default_rms_eps);
    HEARTH_ASSIGN_OR_RETURN(auto theta, f.get_float(a + "rope.freq_base"));
    hp.rope_theta = theta ? *theta : m.arch_->default_rope_theta;
    HEARTH_ASSIGN_OR_RETURN(auto stype, f.get_string(a + "rope.scaling.type"));
    HEARTH_ASSIGN_OR_RETURN(auto sfactor, f.get_float(a + "rope.scaling.factor"));
    if (stype && *stype == "linear" && sfactor && *sfactor > 0) {
      hp.rope_scaling = "linear";
      hp.rope_factor = *sfactor;
    } else if (stype && *stype != "none" && *stype != "linear") {
      return Status::error("unsupported RoPE scaling '" + *stype + "' (" + a +
                           "rope.scaling.type)");
    }
    m.rope_style_ = m.arch_->gguf_rope_style;
    return Status::ok();
  }

  static Status read_hf_hparams(Model& m, const HfConfig& c) {
    m.arch_ = find_arch_by_hf(c.model_type, c.architectures);
    if (!m.arch_)
      return Status::error("unknown architecture '" + c.model_type +
                           "' (config.json model_type); supported: llama, mistral, qwen2");
    HParams& hp = m.hp_;
    hp.n_vocab = c.vocab_size;
    hp.n_embd = c.hidden_size;
    hp.n_layer = c.num_hidden_layers;
    hp.n_head = c.num_attention_heads;
    hp.n_head_kv = c.num_key_value_heads;
    hp.head_dim = c.head_dim;
    hp.n_ff = c.intermediate_size;
    hp.n_ctx_train = c.max_position_embeddings > 0 ? c.max_position_embeddings : 2048;
    hp.rms_eps = float(c.rms_norm_eps);
    hp.rope_theta = c.rope.theta;
    hp.tied_embeddings = c.tie_word_embeddings;
    if (c.rope.type != "default" && c.rope.type != "linear" && c.rope.type != "llama3")
      return Status::error("unsupported RoPE scaling '" + c.rope.type + "' (config.json)");
    hp.rope_scaling = c.rope.type == "default" ? "none" : c.rope.type;
    hp.rope_factor = c.rope.factor;
    m.inv_freq_ =
        rope_inv_freq(hp.head_dim, c.rope.theta, c.rope.type, c.rope.factor, c.rope.low_freq_factor,
                      c.rope.high_freq_factor, c.rope.original_max_position_embeddings);
    m.rope_style_ = kernels::RopeStyle::kHalves;
    return Status::ok();
  }

  static Status validate_hparams(const HParams& hp) {
    if (hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
      return Status::error("head counts " + std::to_string(hp.n_head) + "/" +
                           std::to_string(hp.n_head_kv) + " are not a valid GQA grouping");
    if (hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.head_dim > 1024)
      return Status::error("invalid head dimension " + std::to_string(hp.head_dim));
    if (hp.n_layer <= 0 || hp.n_layer > 4096) return Status::error("invalid layer count");
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
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff;
    const int64_t QD = hp.q_dim(), KVD = hp.kv_dim();
    auto W = [&](TensorRole r, int64_t l, std::vector<int64_t> shape, bool required = true) {
      return take_weight(src.find, src.name(r, l), shape, required);
    };
    HEARTH_ASSIGN_OR_RETURN(m.tok_embd_, W(TensorRole::kTokenEmbedding, -1, {V, E}));
    HEARTH_ASSIGN_OR_RETURN(m.output_norm_src_, W(TensorRole::kOutputNorm, -1, {E}));
    HEARTH_ASSIGN_OR_RETURN(m.output_, W(TensorRole::kOutput, -1, {V, E}, false));
    if (!m.output_) {
      m.output_ = m.tok_embd_;
      hp.tied_embeddings = true;
    }
    m.layers_.resize(size_t(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      LayerWeights& lw = m.layers_[size_t(l)];
      HEARTH_ASSIGN_OR_RETURN(lw.attn_norm_src, W(TensorRole::kAttnNorm, l, {E}));
      HEARTH_ASSIGN_OR_RETURN(lw.wq, W(TensorRole::kAttnQ, l, {QD, E}));
      HEARTH_ASSIGN_OR_RETURN(lw.wk, W(TensorRole::kAttnK, l, {KVD, E}));
      HEARTH_ASSIGN_OR_RETURN(lw.wv, W(TensorRole::kAttnV, l, {KVD, E}));
      HEARTH_ASSIGN_OR_RETURN(lw.wo, W(TensorRole::kAttnOut, l, {E, QD}));
      const bool bias = m.arch_->qkv_bias;
      HEARTH_ASSIGN_OR_RETURN(lw.bq, W(TensorRole::kAttnQBias, l, {QD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.bk, W(TensorRole::kAttnKBias, l, {KVD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.bv, W(TensorRole::kAttnVBias, l, {KVD}, bias));
      HEARTH_ASSIGN_OR_RETURN(lw.ffn_norm_src, W(TensorRole::kFfnNorm, l, {E}));
      HEARTH_ASSIGN_OR_RETURN(lw.w_gate, W(TensorRole::kFfnGate, l, {F, E}));
      HEARTH_ASSIGN_OR_RETURN(lw.w_up, W(TensorRole::kFfnUp, l, {F, E}));
      HEARTH_ASSIGN_OR_RETURN(lw.w_down, W(TensorRole::kFfnDown, l, {E, F}));
    }
    return Status::ok();
  }

  // Places layers: the first gpu_layers on the GPU backend (when asked and available), the rest
  // on the CPU. The LM head goes with the last layer's group; the embedding with the first.
  static Status place(Model& m, const LoadOptions& opt) {
    const int threads = opt.n_threads > 0 ? opt.n_threads : available_cpu_count();
    int64_t gpu_layers =
        opt.gpu_layers < 0 ? m.hp_.n_layer : std::min<int64_t>(opt.gpu_layers, m.hp_.n_layer);
    Backend* gpu = nullptr;
    if (gpu_layers > 0) {
      auto made = make_gpu_backend(0);
      if (!made.is_ok()) {
        log_gpu_fallback(made.message());
        gpu_layers = 0;
      } else {
        m.backends_.push_back(std::move(made).value());
        gpu = m.backends_.back().get();
        if (opt.gpu_layers == kGpuLayersAuto) gpu_layers = layers_that_fit(m, *gpu, opt);
      }
    }
    Backend* cpu = nullptr;
    if (gpu_layers < m.hp_.n_layer) {
      CpuBackendOptions cpu_opt;
      cpu_opt.n_threads = threads;
      cpu_opt.use_weight_cache = opt.use_weight_cache;
      if (m.gguf_ && m.gguf_->mapped()) {  // HF directories (several shards) are not cached
        cpu_opt.source_identity = m.gguf_->mapped()->identity();
        cpu_opt.source_label = m.path_;
      }
      m.backends_.push_back(make_cpu_backend(cpu_opt));
      cpu = m.backends_.back().get();
    }
    if (gpu_layers > 0) m.groups_.push_back({0, gpu_layers, gpu});
    if (gpu_layers < m.hp_.n_layer) m.groups_.push_back({gpu_layers, m.hp_.n_layer, cpu});

    const size_t total = m.layers_.size() + 2;
    size_t done = 0;
    auto progress = [&]() -> Status {
      ++done;
      if (opt.progress && !opt.progress(float(done) / float(total)))
        return Status::error("load cancelled");
      return Status::ok();
    };
    Backend* first = m.groups_.front().backend;
    Backend* last = m.groups_.back().backend;
    HEARTH_TRY(first->prepare_weight(m.tok_embd_));
    HEARTH_TRY(last->prepare_weight(m.output_));
    HEARTH_ASSIGN_OR_RETURN(m.output_norm_, last->prepare_vector(m.output_norm_src_.host));
    HEARTH_TRY(progress());
    for (const auto& g : m.groups_) {
      for (int64_t l = g.first; l < g.last; ++l) {
        LayerWeights& lw = m.layers_[size_t(l)];
        for (Weight* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
          HEARTH_TRY(g.backend->prepare_weight(*w));
        HEARTH_ASSIGN_OR_RETURN(lw.attn_norm, g.backend->prepare_vector(lw.attn_norm_src.host));
        HEARTH_ASSIGN_OR_RETURN(lw.ffn_norm, g.backend->prepare_vector(lw.ffn_norm_src.host));
        if (lw.bq) {
          HEARTH_ASSIGN_OR_RETURN(lw.q_bias, g.backend->prepare_vector(lw.bq.host));
          HEARTH_ASSIGN_OR_RETURN(lw.k_bias, g.backend->prepare_vector(lw.bk.host));
          HEARTH_ASSIGN_OR_RETURN(lw.v_bias, g.backend->prepare_vector(lw.bv.host));
        }
        HEARTH_TRY(progress());
      }
    }
    HEARTH_TRY(progress());
    return Status::ok();
  }

  static void log_gpu_fallback(const std::string& why);

  // --gpu-layers auto: the leading layers whose weights and KV rows (at the context the caller
  // will use) fit the GPU's free memory next to the embedding, the LM head and a reserve for
  // activations and library workspaces. Says what it chose in one line.
  static int64_t layers_that_fit(const Model& m, Backend& gpu, const LoadOptions& opt) {
    const std::optional<uint64_t> free = gpu.device_memory_free();
    if (!free) return m.hp_.n_layer;
    const auto& hp = m.hp_;
    const int64_t ctx = opt.ctx_hint > 0
                            ? opt.ctx_hint
                            : std::min<int64_t>(hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096, 4096);
    uint64_t per_layer = uint64_t(2 * ctx * hp.kv_dim()) * sizeof(float);
    const LayerWeights& lw = m.layers_.front();
    for (const Weight* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
      per_layer += gpu.device_weight_bytes(w->host);
    // Activations of a 512-token pass (forward.cpp's scratch) plus ~1 GiB for cuBLAS workspaces,
    // the decode graph and fragmentation.
    const uint64_t scratch =
        uint64_t(512) *
        uint64_t(4 * hp.n_embd + 2 * hp.q_dim() + 2 * hp.kv_dim() + 2 * hp.n_ff + hp.n_vocab) *
        sizeof(float);
    const uint64_t fixed = gpu.device_weight_bytes(m.tok_embd_.host) +
                           gpu.device_weight_bytes(m.output_.host) + scratch + (1ull << 30);
    const int64_t n = auto_gpu_layers(*free, fixed, per_layer, hp.n_layer);
    std::fprintf(stderr,
                 "hearth: --gpu-layers auto: %lld of %lld layers on the GPU (%.1f GiB free, "
                 "%.2f GiB a layer with its KV at context %lld)\n",
                 (long long)n, (long long)hp.n_layer, double(*free) / double(1ull << 30),
                 double(per_layer) / double(1ull << 30), (long long)ctx);
    return n;
  }

  static Result<std::shared_ptr<Model>> load_gguf(const std::string& path, const LoadOptions& opt) {
    HEARTH_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
    std::shared_ptr<Model> m(new Model());
    m->path_ = path;
    m->format_ = "gguf";
    m->gguf_ = std::make_shared<GgufFile>(std::move(f));
    const GgufFile& g = *m->gguf_;
    HEARTH_TRY(read_gguf_hparams(*m, g).with_context(path));
    HEARTH_TRY(validate_hparams(m->hp_).with_context(path));
    Source src{[&g](const std::string& n) { return g.find_tensor(n); },
               [](TensorRole r, int64_t l) { return gguf_tensor_name(r, l); }};
    HEARTH_TRY(take_weights(*m, src).with_context(path));
    HParams& hp = m->hp_;
    m->inv_freq_ =
        rope_inv_freq(hp.head_dim, hp.rope_theta, hp.rope_scaling, hp.rope_factor, 1, 4, 0);
    // llama.cpp stores llama3-style scaling as per-frequency divisors.
    if (const TensorView* rf = g.find_tensor(gguf_tensor_name(TensorRole::kRopeFreqs))) {
      if (rf->numel() != hp.head_dim / 2)
        return Status::error(path + ": tensor rope_freqs.weight has " +
                             std::to_string(rf->numel()) + " elements, expected " +
                             std::to_string(hp.head_dim / 2));
      if (!dtype_info(rf->dtype).runnable || dtype_info(rf->dtype).quantized)
        return Status::error(path + ": tensor rope_freqs.weight must be a float type");
      std::vector<float> factors(static_cast<size_t>(rf->numel()));
      kernels::dequantize_row(rf->dtype, rf->data, factors.data(), rf->numel());
      for (size_t i = 0; i < factors.size(); ++i) m->inv_freq_[i] /= factors[i];
      hp.rope_scaling = "freqs";
    }
    HEARTH_TRY(place(*m, opt).with_context(path));
    return m;
  }

  static Result<std::shared_ptr<Model>> load_hf(const std::string& dir, const LoadOptions& opt) {
    const std::string config_path = dir + "/config.json";
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path));
    HEARTH_ASSIGN_OR_RETURN(HfConfig config, parse_hf_config(text, config_path));
    HEARTH_ASSIGN_OR_RETURN(SafetensorsCheckpoint ck, SafetensorsCheckpoint::open_dir(dir));
    std::shared_ptr<Model> m(new Model());
    m->path_ = dir;
    m->format_ = "safetensors";
    m->st_ = std::make_shared<SafetensorsCheckpoint>(std::move(ck));
    HEARTH_TRY(read_hf_hparams(*m, config).with_context(config_path));
    HEARTH_TRY(validate_hparams(m->hp_).with_context(config_path));
    const SafetensorsCheckpoint& st = *m->st_;
    Source src{[&st](const std::string& n) { return st.find_tensor(n); },
               [](TensorRole r, int64_t l) { return hf_tensor_name(r, l); }};
    HEARTH_TRY(take_weights(*m, src).with_context(dir));
    HEARTH_TRY(place(*m, opt).with_context(dir));
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

int64_t auto_gpu_layers(uint64_t free_bytes, uint64_t fixed_bytes, uint64_t per_layer_bytes,
                        int64_t n_layer) {
  if (n_layer <= 0 || free_bytes <= fixed_bytes) return 0;
  if (per_layer_bytes == 0) return n_layer;
  return int64_t(
      std::min<uint64_t>(uint64_t(n_layer), (free_bytes - fixed_bytes) / per_layer_bytes));
}

Result<KvCache> Model::new_kv_cache(int64_t n_ctx) const {
  return KvCache::create(layer_backends(), n_ctx, hp_.kv_dim());
}

uint64_t Model::weight_bytes() const {
  uint64_t total = output_.host.nbytes;
  for (const auto& l : layers_)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      total += w->host.nbytes;
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
    for (const Weight* w : {&l.attn_norm_src, &l.ffn_norm_src, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq,
                            &l.bk, &l.bv, &l.w_gate, &l.w_up, &l.w_down})
      add(*w);
  return {counts.begin(), counts.end()};
}

}  // namespace hearth
