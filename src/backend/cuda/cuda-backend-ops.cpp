// The CUDA backend's ops (cuda-backend-impl.h): each flushes or joins the queued work, then
// launches its kernel from src/kernels/cuda. Decode GEMVs reading one x wait in pend_ for one
// launch; a decode step's (or a prefill's) rope q, rope k and K/V stores wait in rope_ for one;
// prefill producers write the next GEMM's split forms (producer_split).
#include "backend/cuda/cuda-backend-impl.h"

namespace hearth::cuda_impl {

void CudaBackend::embed(const Weight& table, const int32_t* ids, int64_t n_tokens, float* out) {
  flush();
  acts_changed();
  const PreparedWeight* pw = prepared(table, "embed");
  if (!pw || n_tokens <= 0) return;
  const int32_t* dev_ids = nullptr;
  if (capturing() || (stepping() && n_tokens == 1 && ids[0] == step_host_->token)) {
    if (n_tokens != 1) return fail("embed of several tokens inside a decode step");
    dev_ids = &step_dev_->token;
  } else {
    for (int64_t t = 0; t < n_tokens; ++t)
      if (ids[t] < 0 || ids[t] >= pw->dw.rows)
        return fail("embed: token id " + std::to_string(ids[t]) + " outside the table");
    dev_ids = static_cast<const int32_t*>(stage_small(ids, size_t(n_tokens) * 4));
    if (!dev_ids) return;
  }
  if (profiler_ && !stepping() && n_tokens > cuda::kGemvMaxTokens)
    profiler_->begin_prefill(stream_, long(n_tokens));
  const int m = prof("embed");
  check(cuda::launch_embed(pw->dw, dev_ids, n_tokens, out, stream_), "embed");
  unprof(m);
}

void CudaBackend::matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) {
  matmul_into(w, x, n_tokens, y, false);
}

void CudaBackend::matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                             float* scratch) {
  const int64_t rows = w.host.rows(), cols = w.host.cols();
  if (n_tokens <= cuda::kGemvMaxTokens || !opt_.fuse || !opt_.matmul_add ||
      (y < x + n_tokens * cols && x < y + n_tokens * rows))
    return Backend::matmul_add(w, x, n_tokens, y, scratch);
  matmul_into(w, x, n_tokens, y, true);
}

void CudaBackend::rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                          float eps) {
  flush();
  acts_changed();
  const int m = prof("rmsnorm");
  if (opt_.fuse && int8_model_ && rows <= cuda::kGemvMaxTokens && n % 32 == 0) {
    if (ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(rows, n), "quantized activations") &&
        check(cuda::launch_rmsnorm_quant(x, w, y, rows, n, eps, xq_buf_, stream_), "rmsnorm"))
      set_xq(y, rows, n);
  } else {
    const cuda::XSplitOut* split = rows > cuda::kGemvMaxTokens ? producer_split(rows * n) : nullptr;
    if (check(cuda::launch_rmsnorm(x, w, y, rows, n, eps, stream_, split), "rmsnorm") && split)
      prefill_x_ = {y, rows * n, cuda::PrefillX::kHiLo8};
  }
  unprof(m);
}

void CudaBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                       const int32_t* pos, const float* inv_freq, kernels::RopeStyle style) {
  flush_gemv();
  acts_changed();
  const float* freq = device_freqs(inv_freq, head_dim / 2);
  if (!freq) return;
  const int st = style == kernels::RopeStyle::kInterleaved ? 0 : 1;
  const bool at_step = stepping() && n_tokens == 1 && pos[0] == step_host_->pos;
  // Prefill rows outside a decode step queue the same way (one launch for the four ops).
  const bool rows =
      opt_.rope_rows_kv && !stepping() && !capturing() && n_tokens > cuda::kGemvMaxTokens;
  // Decode: rope q, rope k, store k, store v wait here and go out as one kernel.
  if (opt_.fuse && (at_step || rows) && rope_.stage == 1 && head_dim == rope_.hd &&
      freq == rope_.freq && st == rope_.style && x != rope_.q && n_tokens == rope_.nt &&
      (at_step || std::equal(pos, pos + n_tokens, pending_pos_.begin()))) {
    rope_.k = x, rope_.nk = n_heads, rope_.stage = 2;
    return;
  }
  flush_rope();
  if (opt_.fuse && (at_step || rows)) {
    rope_ = {};
    rope_.stage = 1, rope_.q = x, rope_.nq = n_heads, rope_.hd = head_dim, rope_.freq = freq;
    rope_.style = st, rope_.nt = n_tokens;
    if (rows) {
      rope_.dev_pos = static_cast<const int32_t*>(stage_small(pos, size_t(n_tokens) * 4));
      if (!rope_.dev_pos) rope_ = {};
      pending_pos_.assign(pos, pos + n_tokens);
    }
    return;
  }
  launch_rope(x, n_tokens, n_heads, head_dim, pos, freq, st);
}

void CudaBackend::attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                            int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                            int64_t head_dim, float scale) {
  // This step's rope q/k + K/V append, when it is what feeds this attention, runs inside the
  // attention kernel (one launch fewer per layer).
  cuda::AttnRope fused_rope;
  bool fuse_rope = false;
  if (rope_.stage == 4 && n_tokens == 1 && q == rope_.q && k_cache == rope_.k_cache &&
      v_cache == rope_.v_cache && n_heads == rope_.nq && n_kv_heads == rope_.nk &&
      head_dim == rope_.hd && pos0 == step_host_->pos && stepping() &&
      cuda::attention_rope_fusable(n_tokens, head_dim, rope_.style)) {
    fused_rope = {rope_.k, rope_.v, rope_.freq, rope_.style};
    fuse_rope = true;
    rope_ = {};
  }
  flush();
  acts_changed();
  // Inside a decode step the split grid covers the whole cache, so one graph serves every pos.
  const bool stepping = state_ != State::kIdle;
  const int64_t max_ctx = stepping ? step_capacity_ : pos0 + n_tokens;
  const int32_t* pos0_dev = capturing() ? &step_dev_->pos : nullptr;
  const int64_t need =
      cuda::attention_partials_floats(n_tokens, n_heads, head_dim, max_ctx) * int64_t(4);
  const size_t cap_before = partials_bytes_;
  if (!ensure(reinterpret_cast<void**>(&partials_), partials_bytes_, size_t(need), "partials"))
    return;
  // The split kernel's per-row counters (at the front of partials) start at zero and are left
  // at zero by every launch; a new buffer or a new row count needs them zeroed once.
  const int64_t rows = n_tokens * n_heads;
  if (need > 0 && (partials_bytes_ != cap_before || rows != partials_rows_)) {
    const size_t slots = size_t(cuda::attention_counter_slots(n_tokens, n_heads)) * 4;
    if (!check(cudaMemsetAsync(partials_, 0, std::min(slots, partials_bytes_), stream_),
               "partials"))
      return;
    partials_rows_ = rows;
  }
  // The output feeds the O projection: its combine pass also quantizes it.
  const int64_t width = n_heads * head_dim;
  const bool quant = opt_.fuse && int8_model_ && n_tokens <= cuda::kGemvMaxTokens &&
                     head_dim % 32 == 0 &&
                     ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(n_tokens, width),
                            "quantized activations");
  const int m = prof("attention");
  if (check(cuda::launch_attention(q, k_cache, v_cache, out, n_tokens, pos0, pos0_dev, max_ctx,
                                   n_heads, n_kv_heads, head_dim, scale, partials_, stream_,
                                   quant ? xq_buf_ : nullptr, fuse_rope ? &fused_rope : nullptr),
            "attention") &&
      quant)
    set_xq(out, n_tokens, width);
  unprof(m);
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  flush();
  acts_changed();
  const int m = prof("swiglu");
  // In a decode step the output feeds the down projection: quantize it in the same pass (one
  // row of n; the GEMV reads the same bytes as [T, n/T]).
  if (opt_.fuse && int8_model_ && stepping() && n % 32 == 0) {
    if (ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(1, n), "quantized activations") &&
        check(cuda::launch_swiglu_quant(gate, up, out, 1, n, xq_buf_, stream_), "swiglu"))
      set_xq(out, 1, n);
  } else {
    const cuda::XSplitOut* split = producer_split(n);
    if (split && !cuda::swiglu_split_able(gate, up, out, n, *split)) split = nullptr;
    if (check(cuda::launch_swiglu(gate, up, out, n, stream_, split), "swiglu") && split)
      prefill_x_ = {out, n, cuda::PrefillX::kHiLo8};
  }
  unprof(m);
}

void CudaBackend::add_inplace(float* y, const float* x, int64_t n) {
  flush_rope();
  acts_changed();
  // The residual add right after a lone GEMV producing x goes into that GEMV's epilogue.
  if (pend_.n == 1 && pend_.jobs[0].y == x && !pend_.jobs[0].add_to &&
      n == pend_.n_tokens * pend_.jobs[0].w.rows && !(y < x + n && x < y + n) &&
      !(y < pend_.x + n_x() && pend_.x < y + n)) {
    pend_.jobs[0].add_to = y;
    flush_gemv();
    return;
  }
  flush_gemv();
  const int m = prof("add");
  check(cuda::launch_add_inplace(y, x, n, stream_), "add");
  unprof(m);
}

void CudaBackend::add_bias(float* y, const float* b, int64_t rows, int64_t n) {
  flush();
  acts_changed();
  check(cuda::launch_add_bias(y, b, rows, n, stream_), "add_bias");
}

void CudaBackend::store_kv(float* cache, const float* src, int64_t pos, int64_t row_floats,
                           int64_t n_tokens, int64_t ring_rows) {
  if (ring_rows > 0) return store_kv_ring(cache, src, pos, row_floats, n_tokens, ring_rows);
  flush_gemv();
  acts_changed();
  const bool at_step = stepping() && n_tokens == 1 && pos == step_host_->pos;
  const bool rows = rope_.dev_pos && n_tokens == rope_.nt;  // a queued prefill rope's rows
  if ((at_step || rows) && rope_.stage == 2 && src == rope_.k &&
      row_floats == rope_.nk * rope_.hd) {
    rope_.k_cache = cache, rope_.cache_pos = pos, rope_.stage = 3;
    return;
  }
  if ((at_step || rows) && rope_.stage == 3 && row_floats == rope_.nk * rope_.hd &&
      cache != rope_.k_cache && pos == rope_.cache_pos) {
    // Waits for the attention call, which can take rope and the append into its kernel.
    rope_.v_cache = cache, rope_.v = src, rope_.stage = 4;
    return;
  }
  flush_rope();
  if (capturing() || at_step) {
    const int m = prof("kv store");
    check(cuda::launch_store_rows(cache, src, &step_dev_->pos, row_floats, n_tokens, stream_),
          "store_kv");
    unprof(m);
    return;
  }
  const int m = prof("kv store");
  copy(cache + pos * row_floats, src, n_tokens * row_floats);
  unprof(m);
}

void CudaBackend::matmul_into(const Weight& w, const float* x, int64_t n_tokens, float* y,
                              bool accumulate) {
  flush_rope();
  const PreparedWeight* pw = prepared(w, "matmul");
  if (!pw) return;
  const cuda::DeviceWeight& dw = pw->dw;
  // y overwriting the quantized x's source makes the cached quantization stale.
  const bool clobbers =
      xq_valid_ && y < xq_src_ + xq_.n_tokens * xq_.cols && xq_src_ < y + n_tokens * dw.rows;
  if (prefill_x_.x && y < prefill_x_.x + prefill_x_.n && prefill_x_.x < y + n_tokens * dw.rows)
    prefill_x_ = {};  // this product overwrites the x whose conversion is cached
  const bool int8 = cuda::uses_int8_gemv(dw.dtype);
  const bool plain = dw.dtype == DType::F32 || dw.dtype == DType::F16 || dw.dtype == DType::BF16;
  if (!accumulate && n_tokens <= cuda::kGemvMaxTokens && (int8 || (plain && dw.cols % 8 == 0))) {
    // Decode GEMVs wait in pend_ so matrices reading the same x share a launch.
    if (pend_.n > 0 && !(opt_.fuse && pend_.n < 3 && !pend_.jobs[0].add_to && pend_.x == x &&
                         pend_.n_tokens == n_tokens && pend_.int8 == int8 &&
                         pend_.jobs[0].w.dtype == dw.dtype && pend_.jobs[0].w.cols == dw.cols))
      flush_gemv();
    if (int8) {
      // Q, K and V (and gate, up) read the same x: quantize it once for all of them (or take
      // what the producing op's fused epilogue wrote: same bytes for any T*cols split).
      if (!(xq_valid_ && xq_src_ == x && xq_.n_tokens * xq_.cols == n_tokens * dw.cols)) {
        flush_gemv();  // queued jobs read the buffer about to be rewritten
        acts_changed();
        if (!ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(n_tokens, dw.cols),
                    "quantized activations"))
          return;
        const int m = prof("quantize x");
        const bool ok =
            check(cuda::launch_quantize_acts(x, n_tokens, dw.cols, xq_buf_, &xq_, stream_),
                  "quantize activations");
        unprof(m);
        if (!ok) return;
        xq_src_ = x;
        xq_valid_ = true;
      }
      pend_.xa = cuda::quantized_acts_view(xq_buf_, n_tokens, dw.cols);
    }
    last_gemm_kind_ = cuda::PrefillX::kNone;
    pend_.jobs[pend_.n++] = {dw, y, nullptr};
    pend_.x = x;
    pend_.n_tokens = n_tokens;
    pend_.int8 = int8;
    // In place (y over x): later jobs could not read x any more.
    if (!opt_.fuse || (y < x + n_tokens * dw.cols && x < y + n_tokens * dw.rows)) flush_gemv();
    if (clobbers) acts_changed();
    return;
  }
  flush_gemv();
  if (clobbers) acts_changed();
  last_gemm_kind_ = cuda::PrefillX::kNone;
  if (!pw->fp8_tried) {
    const Status st =
        make_e4m3_copy(const_cast<PreparedWeight&>(*pw), w.host.name, opt_.fp8_prefill, stream_);
    if (!st.is_ok()) return fail(st.message());
  }
  const size_t need = cuda::matmul_workspace_bytes(pw->dw, n_tokens);
  if (need > workspace_bytes_) prefill_x_ = {};  // the converted x goes with the old buffer
  if (!ensure(reinterpret_cast<void**>(&workspace_), workspace_bytes_, need, "workspace")) return;
  const int m = prof("gemm");
  check(cuda::launch_matmul(pw->dw, x, n_tokens, y, workspace_, workspace_bytes_, blas_, stream_,
                            opt_.prefill_x_cache ? &prefill_x_ : nullptr, accumulate),
        "matmul " + w.host.name);
  unprof(m);
  last_gemm_kind_ = prefill_x_.kind;
  if (y < x + n_tokens * dw.cols && x < y + n_tokens * dw.rows) prefill_x_ = {};  // in place
}

const cuda::XSplitOut* CudaBackend::producer_split(int64_t n) {
  if (!opt_.producer_split || !opt_.fuse || last_gemm_kind_ != cuda::PrefillX::kHiLo8 ||
      stepping() || capturing() || !cuda::prefill_x_producible())
    return nullptr;
  if (!ensure(reinterpret_cast<void**>(&workspace_), workspace_bytes_,
              cuda::prefill_x_slots(n, nullptr).bytes, "workspace"))
    return nullptr;
  split_slots_ = cuda::prefill_x_slots(n, workspace_);
  return &split_slots_;
}

void CudaBackend::flush_gemv() {
  if (pend_.n == 0) return;
  const int n = pend_.n;
  pend_.n = 0;
  const int m = prof(n > 1 ? "gemv (batched)" : pend_.jobs[0].add_to ? "gemv + add" : "gemv");
  check(pend_.int8 ? cuda::launch_gemv_int8_multi(pend_.jobs, n, pend_.xa, stream_)
                   : cuda::launch_gemv_float_multi(pend_.jobs, n, pend_.x, pend_.n_tokens, stream_),
        "gemv");
  unprof(m);
}

void CudaBackend::flush_rope() {
  if (rope_.stage == 0) return;
  const PendingRope r = rope_;
  rope_ = {};
  if (r.dev_pos) return flush_rope_rows(r);
  if (r.stage == 4) {
    const int m = prof("rope+kv store");
    check(cuda::launch_rope_kv(r.q, r.nq, r.k, r.nk, r.hd, &step_dev_->pos, r.freq, r.style,
                               r.k_cache, r.v_cache, r.v, stream_),
          "rope+kv");
    unprof(m);
    return;
  }
  const int32_t pos = step_host_->pos;
  if (r.stage >= 1) launch_rope(r.q, 1, r.nq, r.hd, &pos, r.freq, r.style);
  if (r.stage >= 2) launch_rope(r.k, 1, r.nk, r.hd, &pos, r.freq, r.style);
  if (r.stage >= 3)
    check(cuda::launch_store_rows(r.k_cache, r.k, &step_dev_->pos, r.nk * r.hd, 1, stream_),
          "store_kv");
}

void CudaBackend::flush_rope_rows(const PendingRope& r) {
  const int64_t row = r.nk * r.hd;
  if (r.stage == 4) {
    const int m = prof("rope+kv store");
    // Every layer of a pass rotates by the same positions: one angle table per pass.
    if (pending_pos_ != angles_pos_ || r.freq != angles_freq_ || r.hd != angles_hd_ ||
        freqs_version_ != angles_version_) {
      angles_pos_.clear();
      if (!ensure(reinterpret_cast<void**>(&angles_), angles_bytes_,
                  cuda::rope_angles_bytes(r.nt, r.hd), "rope angles") ||
          !check(cuda::launch_rope_angles(angles_, r.nt, r.hd, r.dev_pos, r.freq, stream_),
                 "rope angles"))
        return unprof(m);
      angles_pos_ = pending_pos_, angles_freq_ = r.freq, angles_hd_ = r.hd;
      angles_version_ = freqs_version_;
    }
    check(cuda::launch_rope_rows_kv(r.q, r.nq, r.k, r.nk, r.hd, r.nt, angles_, r.style, r.k_cache,
                                    r.v_cache, r.v, r.cache_pos, stream_),
          "rope+kv");
    return unprof(m);
  }
  int m = prof("rope");
  check(cuda::launch_rope_rows(r.q, r.nt, r.nq, r.hd, r.dev_pos, r.freq, r.style, stream_), "rope");
  if (r.stage >= 2)
    check(cuda::launch_rope_rows(r.k, r.nt, r.nk, r.hd, r.dev_pos, r.freq, r.style, stream_),
          "rope");
  unprof(m);
  if (r.stage < 3) return;
  m = prof("kv store");
  check(cudaMemcpyAsync(r.k_cache + r.cache_pos * row, r.k, size_t(r.nt * row) * sizeof(float),
                        cudaMemcpyDeviceToDevice, stream_),
        "store_kv");
  unprof(m);
}

void CudaBackend::launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                              const int32_t* pos, const float* freq, int style) {
  const int32_t* dev_pos = nullptr;
  if (stepping() && n_tokens == 1 && pos[0] == step_host_->pos) {
    dev_pos = &step_dev_->pos;
  } else if (capturing()) {
    return fail("rope inside a decode step must be one token at the step's position");
  } else {
    dev_pos = static_cast<const int32_t*>(stage_small(pos, size_t(n_tokens) * 4));
    if (!dev_pos) return;
  }
  const int m = prof("rope");
  // Prefill rows: angles once per (token, pair) for all heads (the per-element kernel spent
  // ~19 us a launch on double sincos at 512 tokens x 32 heads).
  if (n_tokens > cuda::kGemvMaxTokens)
    check(cuda::launch_rope_rows(x, n_tokens, n_heads, head_dim, dev_pos, freq, style, stream_),
          "rope");
  else
    check(cuda::launch_rope(x, n_tokens, n_heads, head_dim, dev_pos, freq, style, stream_), "rope");
  unprof(m);
}

}  // namespace hearth::cuda_impl
