// The CUDA backend's matmuls, norms and activations (cuda-backend-impl.h). Each op launches when
// called. Decode GEMVs of one x go out as one launch through the named op matmul_shared, a
// residual add rides in the GEMV's store through matmul_add, and producers hand the next op its
// input form (int8 activations, prefill split forms) only through the checked hand-offs.
#include "backend/cuda/cuda-backend-impl.h"
#include "base/log.h"

namespace hearth::cuda_impl {

namespace {

bool overlaps(const float* a, int64_t na, const float* b, int64_t nb) {
  return a < b + nb && b < a + na;
}

}  // namespace

void CudaBackend::embed(const Weight& table, const int32_t* ids, int64_t n_tokens, float* out) {
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
  // A pass of several sequences' tokens (kDecodeBatch) is profiled like a prefill pass: whole.
  if (profiler_ && (!decode_pass_ || batch_pass_))
    profiler_->begin_prefill(stream_, long(n_tokens));
  const int m = prof("embed");
  check(cuda::launch_embed(pw->dw, dev_ids, n_tokens, out, stream_), "embed");
  unprof(m);
}

bool CudaBackend::gemm_on_half_copy(const PreparedWeight& pw, int64_t n_tokens) const {
  if (n_tokens < kHalfCopyMinTokens || !half_copies_allowed()) return false;
  // A weight whose copy was not made yet takes the GEMM, which makes it (not inside a capture).
  return pw.dw.w16 || (!pw.copies_made && !capturing() && cuda::weight_half_copy_bytes(pw.dw) > 0);
}

bool CudaBackend::drop_half_copies() {
  half_copies_dropped_ = true;
  if (half_copies_.empty()) return false;
  // Queued work and recorded steps may read the copies.
  check(cudaStreamSynchronize(stream_), "synchronize");
  drop_graph(true);
  uint64_t bytes = 0;
  for (const std::weak_ptr<void>& held : half_copies_) {
    const std::shared_ptr<void> data = held.lock();
    if (!data) continue;
    auto* pw = static_cast<PreparedWeight*>(data.get());
    bytes += cuda::weight_half_copy_bytes(pw->dw);
    cudaFree(pw->half_mem);
    pw->half_mem = nullptr;
    pw->dw.w16 = nullptr;
  }
  half_copies_.clear();
  log_info("CUDA: device memory ran short; the weights' fp16 copies (" +
           std::to_string(bytes >> 20) + " MiB) were freed (--no-cuda-f16-weights skips them)");
  return true;
}

bool CudaBackend::gemv_able(const PreparedWeight& pw, int64_t n_tokens) const {
  const cuda::DeviceWeight& dw = pw.dw;
  if (n_tokens > cuda::kGemvMaxTokens)
    return !gemm_on_half_copy(pw, n_tokens) &&
           n_tokens <=
               (batch_pass_ ? cuda::kMatmulBatchMaxTokens : cuda::kMatmulBatchPrefillMaxTokens) &&
           cuda::matmul_batch_supports(dw);
  const bool plain = dw.dtype == DType::F32 || dw.dtype == DType::F16 || dw.dtype == DType::BF16;
  return cuda::uses_int8_gemv(dw.dtype) || (plain && dw.cols % 8 == 0);
}

void CudaBackend::launch_gemvs(const float* x, int64_t n_tokens, const cuda::GemvJob* jobs,
                               int n_jobs) {
  const cuda::DeviceWeight& dw = jobs[0].w;
  if (n_tokens >= cuda::kMatmulBatchHalfMinTokens)
    return launch_batch_half(x, n_tokens, jobs, n_jobs);
  if (x == folded_.xn) settle_folded_norm();
  const bool int8 = cuda::uses_int8_gemv(dw.dtype);
  cuda::QuantizedActs xa;
  if (int8) {
    // Q, K and V (gate and up) read one x: quantized once, here or in its producer's epilogue.
    if (!xq_ready(x, n_tokens, dw.cols)) {
      if (!ensure(xq_buf_, cuda::quantized_acts_bytes(n_tokens, dw.cols), "quantized activations"))
        return;
      const int m = prof("quantize x");
      const bool ok =
          check(cuda::launch_quantize_acts(x, n_tokens, dw.cols, xq_buf_.ptr, &xq_, stream_),
                "quantize activations");
      unprof(m);
      if (!ok) return;
      hand_off_xq(x, n_tokens, dw.cols);
    }
    xa = cuda::quantized_acts_view(xq_buf_.ptr, n_tokens, dw.cols);
  }
  bool ok = false;
  if (n_tokens > cuda::kGemvMaxTokens) {  // (gemv_able: the batched matmul's dtypes)
    if (!ensure(batch_ws_, cuda::matmul_batch_workspace_bytes(jobs, n_jobs, n_tokens),
                "batch workspace"))
      return;
    const int m = prof("matmul (decode batch)");
    ok = check(cuda::launch_matmul_batch(jobs, n_jobs, xa, batch_ws_.ptr, batch_ws_.bytes, stream_),
               "decode batch matmul");
    unprof(m);
  } else {
    const int m = prof(n_jobs > 1 ? "gemv (batched)" : jobs[0].add_to ? "gemv + add" : "gemv");
    const auto weights =
        opt_.gemv_ahead ? cuda::GemvWeights::kCopiedAhead : cuda::GemvWeights::kLoadedAfterWait;
    ok = check(int8 ? cuda::launch_gemv_int8_multi(jobs, n_jobs, xa, stream_, weights)
                    : cuda::launch_gemv_float_multi(jobs, n_jobs, x, n_tokens, stream_),
               "gemv");
    unprof(m);
  }
  // A GEMV leaves its x alone unless it wrote over it: the int8 form stays good for the next op.
  if (ok && int8 && !writes_over(jobs, n_jobs, x, n_tokens * dw.cols) && xq_src_ == x)
    xq_at_ = stream_ops_;
}

bool CudaBackend::writes_over(const cuda::GemvJob* jobs, int n_jobs, const float* x,
                              int64_t x_elems) const {
  const int64_t n_tokens = x_elems / jobs[0].w.cols;
  for (int j = 0; j < n_jobs; ++j) {
    const int64_t y_elems = n_tokens * jobs[j].w.rows;
    if (overlaps(jobs[j].y, y_elems, x, x_elems) ||
        (jobs[j].add_to && overlaps(jobs[j].add_to, y_elems, x, x_elems)))
      return true;
  }
  return false;
}

// x's fp16 form in batch_xh_ (sized by the caller): Q/K/V and gate/up share one conversion,
// made here or by x's producer (hand_off_xh).
bool CudaBackend::batch_x_half(const float* x, int64_t n_tokens, int64_t cols) {
  if (xh_ready(x, n_tokens, cols)) return true;
  const int m = prof("quantize x");
  const bool ok = check(cuda::launch_batch_x_half(x, n_tokens, cols, batch_xh_.ptr, stream_),
                        "batch fp16 activations");
  unprof(m);
  if (ok) hand_off_xh(x, n_tokens, cols);
  return ok;
}

// A decode step of many sequences on the fp16 form of the batched matmul: x converted once for
// the jobs (Q/K/V or gate/up share it).
void CudaBackend::launch_batch_half(const float* x, int64_t n_tokens, const cuda::GemvJob* jobs,
                                    int n_jobs) {
  const int64_t cols = jobs[0].w.cols;
  if (!ensure(batch_ws_, cuda::matmul_batch_workspace_bytes(jobs, n_jobs, n_tokens),
              "batch workspace") ||
      !ensure(batch_xh_, cuda::batch_x_half_bytes(n_tokens, cols), "batch fp16 activations"))
    return;
  // (x as the rows of a folded norm: only the copy-engine form finishes them)
  cuda::FoldedNorm fn;
  const cuda::FoldedNorm* folded = nullptr;
  if (cuda::matmul_batch_tma_takes(jobs, n_jobs, n_tokens, cols))
    folded = folded_input(x, n_tokens, cols, fn);
  else if (x == folded_.xn)
    settle_folded_norm();
  if (!batch_x_half(x, n_tokens, cols)) return;
  const int m = prof("matmul (decode batch)");
  const bool ok =
      check(folded ? cuda::launch_matmul_batch_half_tma(jobs, n_jobs, batch_xh_.ptr, n_tokens, cols,
                                                        stream_, folded)
                   : cuda::launch_matmul_batch_half(jobs, n_jobs, batch_xh_.ptr, n_tokens, cols,
                                                    batch_ws_.ptr, batch_ws_.bytes, stream_),
            "decode batch matmul");
  unprof(m);
  // The copy stays good for the next matrix of the same x unless this one wrote over x.
  if (ok && !writes_over(jobs, n_jobs, x, n_tokens * cols)) xh_at_ = stream_ops_;
}

void CudaBackend::matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) {
  const PreparedWeight* pw = prepared(w, "matmul");
  if (!pw) return;
  if (gemv_able(*pw, n_tokens)) {
    const cuda::GemvJob job{pw->dw, y, nullptr};
    return launch_gemvs(x, n_tokens, &job, 1);
  }
  launch_gemm(w, *pw, x, n_tokens, y, false);
}

void CudaBackend::matmul_shared(const float* x, int64_t n_tokens, std::span<const MatmulOut> outs) {
  cuda::GemvJob jobs[3];
  bool one_launch = opt_.fuse && !outs.empty() && outs.size() <= 3;
  for (size_t j = 0; one_launch && j < outs.size(); ++j) {
    const PreparedWeight* pw = prepared(*outs[j].w, "matmul");
    if (!pw) return;
    jobs[j] = {pw->dw, outs[j].y, nullptr};
    one_launch = gemv_able(*pw, n_tokens) && pw->dw.dtype == jobs[0].w.dtype &&
                 pw->dw.cols == jobs[0].w.cols &&
                 !overlaps(outs[j].y, n_tokens * pw->dw.rows, x, n_tokens * pw->dw.cols);
  }
  if (one_launch) return launch_gemvs(x, n_tokens, jobs, int(outs.size()));
  // Prefill GEMMs (or mixed shapes): one each; the GEMMs share x's conversion (prefill_x_).
  Backend::matmul_shared(x, n_tokens, outs);
}

void CudaBackend::matmul_gated(const float* x, int64_t n_tokens, const GatedFfn& f, float* out,
                               float* up_rows) {
  const PreparedWeight* pg = prepared(*f.gate, "matmul");
  const PreparedWeight* pu = pg ? prepared(*f.up, "matmul") : nullptr;
  if (!pu) return;
  const int64_t n_ff = pg->dw.rows, cols = pg->dw.cols;
  // Where matmul_shared would run both products as one copy-engine launch and the activation
  // would hand its fp16 form to the down projection (half_output).
  const bool fused = opt_.fuse && f.act != kernels::GatedAct::kSwigluClamped &&
                     n_tokens >= cuda::kMatmulBatchHalfMinTokens && gemv_able(*pg, n_tokens) &&
                     gemv_able(*pu, n_tokens) && half_output(n_tokens, n_ff) &&
                     cuda::matmul_batch_tma_gated_takes(pg->dw, pu->dw, n_tokens);
  if (!fused ||
      !ensure(batch_xh_, cuda::batch_x_half_bytes(n_tokens, cols), "batch fp16 activations") ||
      !ensure(batch_xh_spare_, cuda::batch_x_half_bytes(n_tokens, n_ff),
              "batch fp16 activations")) {
    if (x == folded_.xn) settle_folded_norm();
    return Backend::matmul_gated(x, n_tokens, f, out, up_rows);
  }
  cuda::FoldedNorm fn;
  const cuda::FoldedNorm* folded = folded_input(x, n_tokens, cols, fn);
  if (!batch_x_half(x, n_tokens, cols)) return;
  const int m = prof("matmul + act (decode batch)");
  const cuda::GatedForm form =
      f.act == kernels::GatedAct::kGeluTanh ? cuda::GatedForm::kGeluTanh : cuda::GatedForm::kSilu;
  const bool ok =
      check(cuda::launch_matmul_batch_tma_gated(pg->dw, pu->dw, form, batch_xh_.ptr, n_tokens, out,
                                                batch_xh_spare_.ptr, stream_, folded),
            "decode batch gate/up");
  unprof(m);
  if (!ok) return;
  std::swap(batch_xh_, batch_xh_spare_);
  hand_off_xh(out, n_tokens, n_ff);
}

void CudaBackend::matmul_add_norm(const Weight& w, const float* x, int64_t n_tokens, float* y,
                                  float* scratch, const float* norm_w, float eps, float* xn) {
  retire_folded_norm();
  const PreparedWeight* pw = prepared(w, "matmul_add_norm");
  if (!pw) return;
  const int64_t rows = pw->dw.rows, cols = pw->dw.cols;
  const cuda::GemvJob job{pw->dw, scratch, y};
  // Where the product takes the copy-engine form, the rows the batched matmul's fp16 form, and
  // the last norm of these rows left its scale (norm_scale_rows_).
  const bool fold = opt_.fuse && n_tokens >= cuda::kMatmulBatchHalfMinTokens &&
                    gemv_able(*pw, n_tokens) && half_output(n_tokens, rows) &&
                    norm_scale_rows_ == n_tokens &&
                    !overlaps(y, n_tokens * rows, x, n_tokens * cols) &&
                    !overlaps(scratch, n_tokens * rows, x, n_tokens * cols) &&
                    !overlaps(y, n_tokens * rows, scratch, n_tokens * rows) &&
                    cuda::matmul_batch_tma_norm_takes(job, n_tokens);
  const int tiles = int((rows + 127) / 128);
  if (!fold ||
      !ensure(batch_xh_, cuda::batch_x_half_bytes(n_tokens, cols), "batch fp16 activations") ||
      !ensure(batch_xh_spare_, cuda::batch_x_half_bytes(n_tokens, rows),
              "batch fp16 activations") ||
      !ensure(norm_ss_, size_t(n_tokens) * size_t(tiles) * sizeof(float), "norm sums") ||
      !ensure(batch_ws_, cuda::matmul_batch_workspace_bytes(&job, 1, n_tokens), "batch workspace"))
    return Backend::matmul_add_norm(w, x, n_tokens, y, scratch, norm_w, eps, xn);
  if (!batch_x_half(x, n_tokens, cols)) return;
  cuda::FoldedNorm fn;
  fn.w = norm_w;
  fn.s = norm_scale(norm_scale_at_);
  fn.next_xh = batch_xh_spare_.ptr;
  fn.ss = norm_ss_.as<float>();
  const int m = prof("matmul + add + norm (decode batch)");
  const bool ok =
      check(cuda::launch_matmul_batch_half_norm(job, batch_xh_.ptr, n_tokens, cols, batch_ws_.ptr,
                                                batch_ws_.bytes, stream_, fn),
            "decode batch matmul + norm");
  unprof(m);
  if (!ok) return;
  std::swap(batch_xh_, batch_xh_spare_);
  hand_off_xh(xn, n_tokens, rows);
  folded_ = {xn, y, norm_w, eps, n_tokens, rows, tiles, false};
}

const cuda::FoldedNorm* CudaBackend::folded_input(const float* x, int64_t rows, int64_t cols,
                                                  cuda::FoldedNorm& fn) {
  if (!folded_.xn || x != folded_.xn) return nullptr;
  if (!xh_ready(x, rows, cols) || rows != folded_.rows || cols != folded_.n) {
    settle_folded_norm();
    return nullptr;
  }
  fn.ss_in = norm_ss_.as<float>();
  fn.ss_tiles = folded_.tiles;
  fn.s_in = norm_scale(norm_scale_at_);
  fn.r_out = norm_scale(1 - norm_scale_at_);
  fn.n = int(folded_.n);
  fn.eps = folded_.eps;
  folded_.scaled = true;
  return &fn;
}

void CudaBackend::settle_folded_norm() {
  if (!folded_.xn) return;
  const FoldedRows f = folded_;
  folded_ = {};
  rmsnorm(f.y, f.w, const_cast<float*>(f.xn), f.rows, f.n, f.eps);
}

void CudaBackend::retire_folded_norm() {
  if (!folded_.xn) return;
  if (folded_.scaled)
    norm_scale_at_ = 1 - norm_scale_at_;
  else
    norm_scale_rows_ = -1;
  folded_ = {};
}

void CudaBackend::matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                             float* scratch) {
  retire_folded_norm();
  const PreparedWeight* pw = prepared(w, "matmul_add");
  if (!pw) return;
  const int64_t rows = pw->dw.rows, cols = pw->dw.cols;
  const bool separate = !overlaps(y, n_tokens * rows, x, n_tokens * cols) &&
                        !overlaps(scratch, n_tokens * rows, x, n_tokens * cols) &&
                        !overlaps(y, n_tokens * rows, scratch, n_tokens * rows);
  if (opt_.fuse && separate && gemv_able(*pw, n_tokens)) {
    const cuda::GemvJob job{pw->dw, scratch, y};  // scratch = the product, y += it
    return launch_gemvs(x, n_tokens, &job, 1);
  }
  if (opt_.fuse && opt_.matmul_add && separate && !gemv_able(*pw, n_tokens))
    return launch_gemm(w, *pw, x, n_tokens, y, true);
  Backend::matmul_add(w, x, n_tokens, y, scratch);
}

void CudaBackend::launch_gemm(const Weight& w, const PreparedWeight& pw, const float* x,
                              int64_t n_tokens, float* y, bool accumulate) {
  if (x == folded_.xn) settle_folded_norm();
  // Read the hand-off before this op's own allocations count as stream work.
  if (prefill_x_at_ != stream_ops_) prefill_x_ = {};
  if (!pw.copies_made) {
    CudaOptions opt = opt_;
    opt.half_weights = half_copies_allowed();
    const Status st = make_gemm_copies(const_cast<PreparedWeight&>(pw), w.host.name, opt, stream_);
    if (!st.is_ok()) return fail(st.message());
    if (pw.half_mem) half_copies_.push_back(w.backend_data);
  }
  cublasHandle_t blas = this->blas();
  if (!blas) return;
  const size_t need = cuda::matmul_workspace_bytes(pw.dw, n_tokens);
  if (need > workspace_.bytes) prefill_x_ = {};  // the converted x goes with the old buffer
  if (!ensure(workspace_, need, "workspace")) return;
  const int m = prof("gemm");
  const bool ok =
      check(cuda::launch_matmul(pw.dw, x, n_tokens, y, workspace_.ptr, workspace_.bytes, blas,
                                stream_, opt_.prefill_x_cache ? &prefill_x_ : nullptr, accumulate),
            "matmul " + w.host.name);
  unprof(m);
  last_gemm_kind_ = prefill_x_.kind;
  // x's conversion stays in the workspace for the next GEMM of the same x, unless y wrote over x.
  if (ok && !overlaps(y, n_tokens * pw.dw.rows, x, n_tokens * pw.dw.cols))
    prefill_x_at_ = stream_ops_;
  else
    prefill_x_ = {};
}

const cuda::XSplitOut* CudaBackend::producer_split(int64_t n) {
  if (!opt_.producer_split || !opt_.fuse || decode_pass_ ||
      last_gemm_kind_ != cuda::PrefillX::kHiLo8 || stepping() || capturing() ||
      !cuda::prefill_x_producible())
    return nullptr;
  if (!ensure(workspace_, cuda::prefill_x_slots(n, nullptr).bytes, "workspace")) return nullptr;
  split_slots_ = cuda::prefill_x_slots(n, workspace_.ptr);
  return &split_slots_;
}

void CudaBackend::rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                          float eps) {
  if (x == folded_.xn) settle_folded_norm();
  retire_folded_norm();
  const int m = prof("rmsnorm");
  if (quantize_output(rows, n)) {
    if (ensure(xq_buf_, cuda::quantized_acts_bytes(rows, n), "quantized activations") &&
        check(cuda::launch_rmsnorm_quant(x, w, y, rows, n, eps, xq_buf_.ptr, stream_), "rmsnorm"))
      hand_off_xq(y, rows, n);
  } else if (half_output(rows, n) &&
             ensure(batch_xh_, cuda::batch_x_half_bytes(rows, n), "batch fp16 activations")) {
    // (and each row's scale, which a norm folded after this one carries: matmul_add_norm)
    const bool scale =
        rows <= cuda::kMatmulBatchMaxTokens &&
        ensure(norm_scale_, 2 * cuda::kMatmulBatchMaxTokens * sizeof(float), "norm scales");
    if (check(cuda::launch_rmsnorm(x, w, y, rows, n, eps, stream_, nullptr, batch_xh_.ptr,
                                   scale ? norm_scale(1 - norm_scale_at_) : nullptr),
              "rmsnorm")) {
      hand_off_xh(y, rows, n);
      if (scale) norm_scale_at_ = 1 - norm_scale_at_, norm_scale_rows_ = rows;
    }
  } else {
    // (a GEMV of at most kGemvMaxTokens rows takes no split forms; producer_split also refuses
    // decode passes)
    const cuda::XSplitOut* split = rows > cuda::kGemvMaxTokens ? producer_split(rows * n) : nullptr;
    if (check(cuda::launch_rmsnorm(x, w, y, rows, n, eps, stream_, split), "rmsnorm") && split)
      hand_off_prefill_x(y, rows * n);
  }
  unprof(m);
}

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  gated(Gate::kSilu, gate, up, out, n);
}

void CudaBackend::gated(Gate g, const float* gate, const float* up, float* out, int64_t n) {
  const bool silu = g == Gate::kSilu;
  const char* name = silu ? "swiglu" : "gelu_tanh_gated";
  const int m = prof(silu ? "swiglu" : "gelu");
  // The output feeds the down projection's GEMV: quantize it in the same pass, as one row of n
  // (the GEMV reads the same bytes as [T, n/T]: blocks of 32 never straddle a row).
  if (quantize_output(pass_tokens_, n)) {
    if (ensure(xq_buf_, cuda::quantized_acts_bytes(1, n), "quantized activations") &&
        check(silu ? cuda::launch_swiglu_quant(gate, up, out, 1, n, xq_buf_.ptr, stream_)
                   : cuda::launch_gelu_tanh_gated_quant(gate, up, out, 1, n, xq_buf_.ptr, stream_),
              name))
      hand_off_xq(out, 1, n);
  } else if (pass_tokens_ > 0 && n % pass_tokens_ == 0 &&
             half_output(pass_tokens_, n / pass_tokens_) &&
             ensure(batch_xh_, cuda::batch_x_half_bytes(pass_tokens_, n / pass_tokens_),
                    "batch fp16 activations")) {
    if (check(silu ? cuda::launch_swiglu(gate, up, out, n, stream_, nullptr, batch_xh_.ptr)
                   : cuda::launch_gelu_tanh_gated(gate, up, out, n, stream_, batch_xh_.ptr),
              name))
      hand_off_xh(out, pass_tokens_, n / pass_tokens_);
  } else if (silu) {
    const cuda::XSplitOut* split = producer_split(n);
    if (split && !cuda::swiglu_split_able(gate, up, out, n, *split)) split = nullptr;
    if (check(cuda::launch_swiglu(gate, up, out, n, stream_, split), name) && split)
      hand_off_prefill_x(out, n);
  } else {
    check(cuda::launch_gelu_tanh_gated(gate, up, out, n, stream_), name);
  }
  unprof(m);
}

void CudaBackend::post_norm_add(float* y, const float* w_post, float* x, int64_t rows, int64_t n,
                                float eps, const float* w_next, float* xn) {
  const int64_t e = rows * n;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  // Prefill passes keep the three ops: their norm writes the GEMM's split forms.
  if (!opt_.fuse || !decode_pass_ || !cuda::post_norm_add_fits(n) || !aligned(x) || !aligned(y) ||
      overlaps(x, e, y, e) ||
      (w_next && (!aligned(xn) || overlaps(x, e, xn, e) || (xn != y && overlaps(xn, e, y, e)))))
    return Backend::post_norm_add(y, w_post, x, rows, n, eps, w_next, xn);
  void* qbuf = nullptr;
  void* xh = nullptr;
  if (w_next && quantize_output(rows, n)) {
    if (!ensure(xq_buf_, cuda::quantized_acts_bytes(rows, n), "quantized activations")) return;
    qbuf = xq_buf_.ptr;
  } else if (w_next && half_output(rows, n)) {
    if (!ensure(batch_xh_, cuda::batch_x_half_bytes(rows, n), "batch fp16 activations")) return;
    xh = batch_xh_.ptr;
  }
  const int m = prof("rmsnorm + add");
  if (check(cuda::launch_post_norm_add(y, w_post, x, rows, n, eps, w_next, xn, qbuf, xh, stream_),
            "post_norm_add")) {
    if (qbuf) hand_off_xq(xn, rows, n);
    if (xh) hand_off_xh(xn, rows, n);
  }
  unprof(m);
}

void CudaBackend::add_inplace(float* y, const float* x, int64_t n) {
  unfused_op("add", "add", [&] { return cuda::launch_add_inplace(y, x, n, stream_); });
}

void CudaBackend::add_bias(float* y, const float* b, int64_t rows, int64_t n) {
  unfused_op("add", "add_bias", [&] { return cuda::launch_add_bias(y, b, rows, n, stream_); });
}

}  // namespace hearth::cuda_impl
