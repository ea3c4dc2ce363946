// The CPU backend: host memory, ops forwarded to kernels/ with one persistent thread pool (or,
// inside a decode step run as lanes, on the lane's thread alone), and
// weights repacked into the kernels' layouts (cached on disk by backend/weight-cache.h).
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu-backend.h"
#include "backend/cpu-kv-memory.h"
#include "backend/decode-lane-choice.h"
#include "backend/weight-cache.h"
#include "base/half.h"
#include "base/log.h"
#include "base/mapped-file.h"
#include "base/reserved-memory.h"
#include "kernels/cpu/small-ops.h"

namespace hearth {

namespace {

// `bytes` (a multiple of 64 here) 64-byte aligned, or from 2 MiB on, 2 MiB-aligned and advised
// for huge pages: the process leaves the rest of its heap on 4 KiB pages
// (base/process-memory.h), and these are streamed every token (weights, the KV cache, long
// prefills' activations). nullptr when out of memory.
void* alloc_streamed(size_t bytes) {
  constexpr size_t kHuge = 2u << 20;
  void* p = nullptr;
  if (posix_memalign(&p, bytes >= kHuge ? kHuge : 64, bytes ? bytes : 64) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  if (p && bytes >= kHuge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& opt)
      : opt_(opt),
        pool_(opt.n_threads),
        kv_memory_(opt.kv_parked_limit.value_or(CpuKvMemory::default_parked_limit())) {}
  ~CpuBackend() override {
    for (float* p : vectors_) std::free(p);
  }

  std::string name() const override { return "cpu"; }

  float* alloc(int64_t n) override {
    // 64-byte aligned so SIMD kernels can use aligned loads on activations.
    void* p = alloc_streamed((size_t(n) * sizeof(float) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void free(float* p) override { std::free(p); }

  // Lanes (Backend::decode_lanes): one a thread, once every thread has at least two rows; in
  // auto mode where the timing of both forms says so (backend/decode-lane-choice.h), for
  // weights that some core's caches could hold (each lane reads them all: a 7B's 3.8 GB over 16
  // lanes would make every step a trial of ~60 GB).
  static constexpr uint64_t kMaxLaneWeightBytes = uint64_t(512) << 20;
  int decode_lanes(int64_t rows) override {
    if (!lanes_fit(rows)) return 1;
    switch (opt_.cpu.decode_lanes) {
      case CpuOptions::Lanes::kOn:
        return pool_.size();
      case CpuOptions::Lanes::kOff:
        return 1;
      case CpuOptions::Lanes::kAuto:
        break;
    }
    return lanes_timed() ? lane_choice_.choose(rows) : 1;
  }
  void decode_step_took(int64_t rows, int lanes, double seconds) override {
    if (lanes_fit(rows) && lanes_timed()) lane_choice_.took(rows, lanes, seconds);
  }
  void run_lanes(int n, const std::function<void(int)>& lane) override {
    pool_.run([&](int t, int threads) {
      in_lane_ = true;
      for (int i = t; i < n; i += threads) lane(i);
      in_lane_ = false;
    });
  }
  void upload(float* dst, const float* src, int64_t n) override {
    std::memcpy(dst, src, size_t(n) * 4);
  }
  void download(float* dst, const float* src, int64_t n) override {
    std::memcpy(dst, src, size_t(n) * 4);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    std::memmove(dst, src, size_t(n) * 4);
  }
  // The logits are host memory: the host sampler draws from the rows themselves (no draws).
  void pick_rows(const float* logits, int64_t rows, int64_t n_vocab, std::span<const RowDraw> draws,
                 int32_t* ids) override {
    for (int64_t r = 0; r < rows; ++r) ids[r] = greedy_argmax(logits + r * n_vocab, n_vocab);
    if (!draws.empty()) Backend::pick_rows(logits, rows, n_vocab, draws, ids);  // (refuses them)
  }

  // KV caches reserve address space and commit pages as they grow (base/reserved-memory.h);
  // a decommit's pages stay parked for the next commit (backend/cpu-kv-memory.h).
  uint64_t commit_granularity() const override { return host_page_size(); }
  void* reserve_kv(uint64_t bytes) override {
    void* p = kv_memory_.reserve(bytes);
    if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    // As alloc_streamed: the kernel may back whole committed 2 MiB extents with huge pages.
    if (bytes >= (2u << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
  }
  bool commit(void* base, uint64_t offset, uint64_t bytes) override {
    return kv_memory_.commit(base, offset, bytes);
  }
  void decommit(void* base, uint64_t offset, uint64_t bytes) override {
    kv_memory_.decommit(base, offset, bytes);
  }
  void unreserve(void* base, uint64_t bytes) override {
    kv_memory_.unreserve(base, bytes);
  }
  void release_parked_kv() override {
    kv_memory_.release_parked();
  }

  // Matrices whose kernels want another layout are packed once: from the on-disk cache when it
  // holds them (mmapped, so RSS is not doubled), else packed now and appended to the cache.
  // Either way the source bytes are not read again, so their pages leave this process (a first
  // load held the file and the packed copy at once: 1B Q4_0 1.20 GB for a 0.62 GB file).
  // Embedding tables are only gathered by row, so they keep the file's layout (a tied LM head
  // comes under its own name, model/loader.cpp, and is packed; its rows fault back in as read).
  Status prepare_weight(Weight& w) override {
    if (w.backend_data || !w.host.data || w.host.shape.size() != 2) return Status::ok();
    if (w.host.name.rfind("token_embd", 0) == 0) return Status::ok();
    const int64_t d = w.host.rows(), n = w.host.cols();
    const auto bytes = kernels::packed_size(w.host.dtype, d, n);
    if (!bytes) return Status::ok();
    weight_bytes_ += *bytes;
    if (WeightCache* cache = open_cache()) {
      if (const uint8_t* hit = cache->find(w.host.name, *bytes, &pool_)) {
        w.backend_data = std::make_shared<Packed>(Packed{hit, nullptr, cache_});
        MappedFile::release_pages(w.host.data, w.host.nbytes);
        return Status::ok();
      }
    }
    // Aligned and advised like the cache's mapping (base/mapped-file.cpp).
    void* p = alloc_streamed((*bytes + 63) / 64 * 64);
    if (!p)
      return Status::error(w.host.name + ": out of memory packing " + std::to_string(*bytes) +
                           " bytes");
    std::shared_ptr<uint8_t> owned(static_cast<uint8_t*>(p), std::free);
    kernels::pack_weight(w.host, owned.get(), pool_);
    if (WeightCache* cache = open_cache()) {
      const Status st = cache->add(w.host.name, owned.get(), *bytes, &pool_);
      if (!st.is_ok()) disable_cache(st.message());
    }
    w.backend_data = std::make_shared<Packed>(Packed{owned.get(), owned, nullptr});
    MappedFile::release_pages(w.host.data, w.host.nbytes);
    return Status::ok();
  }

  Result<float*> prepare_vector(const TensorView& v) override {
    const int64_t n = v.numel();
    if (n <= 0) return Status::error(v.name + ": empty vector");
    float* out = alloc(n);
    vectors_.push_back(out);
    kernels::dequantize_row(v.dtype, v.data, out, n);
    return out;
  }

  void embed(const Weight& table, const int32_t* ids, int64_t T, float* out) override {
    const int64_t n = table.host.cols();
    for (int64_t t = 0; t < T; ++t)
      kernels::dequantize_row(table.host.dtype, table.host.row(ids[t]), out + t * n, n);
  }
  void matmul(const Weight& w, const float* x, int64_t T, float* y) override {
    if (w.backend_data) {
      const auto* p = static_cast<const Packed*>(w.backend_data.get());
      kernels::matmul_packed(w.host.dtype, p->data, w.host.rows(), w.host.cols(), x, T, y, pool(),
                             opt_.cpu.amx);
      return;
    }
    kernels::matmul(w.host, x, T, y, pool(), opt_.cpu.amx);
  }
  void matmul_shared(const float* x, int64_t T, std::span<const MatmulOut> outs) override {
    // All packed (the usual case): one pass over every matrix. Otherwise one call each.
    std::array<kernels::PackedMatmul, 4> mats;
    bool all_packed = outs.size() <= mats.size();
    for (size_t i = 0; all_packed && i < outs.size(); ++i) {
      const Weight& w = *outs[i].w;
      all_packed = w.backend_data != nullptr && w.host.cols() == outs[0].w->host.cols();
      if (all_packed)
        mats[i] = {w.host.dtype, static_cast<const Packed*>(w.backend_data.get())->data,
                   w.host.rows(), outs[i].y};
    }
    if (!all_packed) return Backend::matmul_shared(x, T, outs);
    kernels::matmul_packed_shared({mats.data(), outs.size()}, outs[0].w->host.cols(), x, T, pool(),
                                  opt_.cpu.amx);
  }
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
               float eps) override {
    kernels::rmsnorm(x, w, y, rows, n, eps, pool());
  }
  void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const float* inv_freq, kernels::RopeStyle style) override {
    kernels::rope(x, T, n_heads, head_dim, pos, inv_freq, style, pool());
  }
  void attention(const float* q, const kernels::KvRows& k, const kernels::KvRows& v, float* out,
                 int64_t T, int64_t pos0, int64_t n_heads, int64_t n_kv, int64_t hd,
                 float scale) override {
    kernels::attention(q, k, v, out, T, pos0, n_heads, n_kv, hd, scale, kernels::AttentionMask{},
                       pool());
  }
  bool supports_kv_type(DType t) const override {
    return kernels::is_kv_type(t);
  }
  // The rows are converted as they are stored (f32 -> f16 / bf16 / q8_0); a ring wraps once.
  void store_kv(void* cache, DType type, const float* src, int64_t pos, int64_t row_floats,
                int64_t n_tokens, int64_t ring_rows) override {
    auto* rows = static_cast<uint8_t*>(cache);
    const int64_t row_bytes = kernels::kv_row_bytes(type, row_floats);
    const int64_t row0 = ring_rows > 0 ? pos % ring_rows : pos;
    const int64_t first = ring_rows > 0 ? std::min(n_tokens, ring_rows - row0) : n_tokens;
    kernels::store_kv_rows(type, src, rows + row0 * row_bytes, first, row_floats);
    if (first < n_tokens)
      kernels::store_kv_rows(type, src + first * row_floats, rows, n_tokens - first, row_floats);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    kernels::swiglu(gate, up, out, n, pool());
  }

  // Routed on the host (this is the host); the selected experts run as two grouped matmuls on
  // their packed layouts (kernels/ops.h moe_experts), not expert by expert.
  void moe_ffn(const MoeBlock& m) override {
    const int64_t T = m.n_tokens;
    // A decode token's router (n_expert rows, ~70 KB at Q4_K) runs on the caller alone: a
    // hand-off to the pool costs as much as the rows, and far more when the host is busy.
    const auto* router = static_cast<const Packed*>(m.router->backend_data.get());
    if (T == 1 && router)
      kernels::matmul_packed(m.router->host.dtype, router->data, m.router->host.rows(),
                             m.router->host.cols(), m.x, T, m.logits, solo_, opt_.cpu.amx);
    else
      matmul(*m.router, m.x, T, m.logits);
    if (m.router_bias) add_bias(m.logits, m.router_bias, T, m.n_expert);
    thread_local std::vector<int32_t> ids;  // reused: a decode step must not allocate
    thread_local std::vector<float> weights;
    ids.resize(size_t(T * m.n_used)), weights.resize(size_t(T * m.n_used));
    kernels::route_top_k(m.logits, T, m.n_expert, m.n_used, m.renormalise, ids.data(),
                         weights.data());
    kernels::MoeExperts ex;
    ex.n_embd = m.n_embd, ex.n_ff = m.n_ff, ex.n_expert = m.n_expert, ex.n_used = m.n_used;
    ex.ctx = &m;
    ex.matrix = [](const void* ctx, kernels::ExpertProj p, int64_t e) {
      const Weight& w = expert_list(*static_cast<const MoeBlock*>(ctx), p, e);
      const auto* packed = static_cast<const Packed*>(w.backend_data.get());
      return kernels::ExpertMatrix{&w.host, packed ? packed->data : nullptr};
    };
    if (!m.gate_bias.empty())
      ex.bias = [](const void* ctx, kernels::ExpertProj p, int64_t e) -> const float* {
        const MoeBlock& b = *static_cast<const MoeBlock*>(ctx);
        const auto& list = p == kernels::ExpertProj::kGate ? b.gate_bias
                           : p == kernels::ExpertProj::kUp ? b.up_bias
                                                           : b.down_bias;
        return list.empty() ? nullptr : list[size_t(e)];
      };
    ex.act = m.act, ex.swiglu_alpha = m.swiglu_alpha, ex.swiglu_limit = m.swiglu_limit;
    kernels::moe_experts(ex, m.x, T, ids.data(), weights.data(), m.out, m.accumulate, pool(),
                         opt_.cpu.amx);
  }

  uint32_t features() const override {
    return kQkNorm | kGeluGated | kMaskedAttention | kPartialRope | kScaleOps | kMoe |
           kAttentionSinks | kClampedSwiglu;
  }
  void rmsnorm_heads(float* x, const float* w, int64_t rows, int64_t head_dim, float eps) override {
    kernels::rmsnorm(x, w, x, rows, head_dim, eps, pool());  // element-wise: in place is safe
  }
  // A decode step of several sequences (one token each): every K/V row stored first, then all
  // their attention in one kernels::attention_segments call (one parallel pass: one join a layer
  // instead of one a sequence; on one thread each sequence reads the next one's rows ahead).
  void rope_append_attend_batch(const AttentionBlock& a) override {
    norm_and_rope(a);
    int64_t row = 0;
    for (const KvSegment& s : a.segments) {
      store_segment(a, s, row);
      row += s.n_tokens;
    }
    thread_local std::vector<kernels::AttentionSegment> segs;
    segs.clear();
    for (const KvSegment& s : a.segments)
      segs.push_back({kernels::KvRows{s.k_cache, s.k_type}, kernels::KvRows{s.v_cache, s.v_type},
                      s.pos0, s.ring_rows});
    const kernels::AttentionMask mask{a.window, a.softcap, 0, a.sinks};
    kernels::attention_segments(a.q, segs, a.out, a.n_heads, a.n_kv_heads, a.head_dim, a.scale,
                                mask, pool());
  }
  void attention_masked(const float* q, const kernels::KvRows& k, const kernels::KvRows& v,
                        float* out, int64_t T, int64_t pos0, int64_t n_heads, int64_t n_kv,
                        int64_t hd, float scale, const kernels::AttentionMask& mask) override {
    kernels::attention(q, k, v, out, T, pos0, n_heads, n_kv, hd, scale, mask, pool());
  }
  void rope_partial(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const int32_t* pos, const float* inv_freq, kernels::RopeStyle style,
                    float mscale) override {
    kernels::rope_partial(x, T, n_heads, head_dim, n_rot, pos, inv_freq, style, mscale, pool());
  }
  void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) override {
    kernels::gelu_tanh_gated(gate, up, out, n, pool());
  }
  void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                      float limit) override {
    kernels::swiglu_clamped(gate, up, out, n, alpha, limit, pool());
  }
  void softcap(float* x, int64_t n, float cap) override {
    kernels::softcap(x, n, cap);
  }
  void scale(float* x, int64_t n, float s) override {
    kernels::scale(x, n, s);
  }
  void add_inplace(float* y, const float* x, int64_t n) override {
    kernels::add_inplace(y, x, n, pool());
  }
  void add_bias(float* y, const float* b, int64_t rows, int64_t n) override {
    kernels::add_bias(y, b, rows, n);
  }

 private:
  struct Packed {
    const uint8_t* data;                 // 64-byte aligned packed bytes
    std::shared_ptr<uint8_t> owned;      // set when packed in memory
    std::shared_ptr<WeightCache> cache;  // set when the cache file maps them
  };

  static const Weight& expert_list(const MoeBlock& m, kernels::ExpertProj p, int64_t e) {
    const std::span<const Weight> list = p == kernels::ExpertProj::kGate ? m.gate
                                         : p == kernels::ExpertProj::kUp ? m.up
                                                                         : m.down;
    return list[size_t(e)];
  }

  // The cache for this model's source, opened at the first packable weight; null when off.
  WeightCache* open_cache() {
    if (!cache_tried_) {
      cache_tried_ = true;
      if (opt_.use_weight_cache && !opt_.source_identity.empty()) {
        const std::string key =
            weight_cache_key(opt_.source_identity, kernels::packed_layouts_signature(), 1);
        auto c = WeightCache::open(opt_.cache_dir.empty() ? weight_cache_dir() : opt_.cache_dir,
                                   key, opt_.source_label,
                                   CacheVerify::with_random_phase(opt_.cpu.cache_verify));
        if (c.is_ok())
          cache_ = c.value();
        else
          disable_cache(c.message());
      }
    }
    return cache_.get();
  }
  // A cache that cannot be used costs speed at the next load, never this one.
  void disable_cache(const std::string& why) {
    log_warn("weight cache off: " + why);
    cache_.reset();
  }

  CpuBackendOptions opt_;
  bool cache_tried_ = false;
  std::shared_ptr<WeightCache> cache_;
  ThreadPool pool_;
  ThreadPool solo_{1};  // runs on the caller: no workers, no hand-off
  // Set on a thread while it runs a lane: its ops then run on it alone.
  static thread_local bool in_lane_;
  ThreadPool& pool() {
    return in_lane_ ? solo_ : pool_;
  }
  DecodeLaneChoice lane_choice_{pool_.size()};
  uint64_t weight_bytes_ = 0;  // the packed matrices' (decode_lanes)
  // A step of `rows` can take lanes: two rows a thread at least (a lane of one row runs the
  // one-thread GEMV, slower than the pool's).
  bool lanes_fit(int64_t rows) const {
    return pool_.size() >= 2 && rows >= 2 * pool_.size();
  }
  // Auto mode, and weights whose trials cost little (kMaxLaneWeightBytes).
  bool lanes_timed() const {
    return opt_.cpu.decode_lanes == CpuOptions::Lanes::kAuto &&
           weight_bytes_ <= kMaxLaneWeightBytes;
  }
  std::vector<float*> vectors_;
  CpuKvMemory kv_memory_;
};

thread_local bool CpuBackend::in_lane_ = false;

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  CpuBackendOptions opt;
  opt.n_threads = n_threads;
  return make_cpu_backend(opt);
}

}  // namespace hearth
