// The CUDA backend's ops that only some families need (Backend::Feature: per-head norm, GELU
// gate, masked attention and sinks, partial RoPE, scale / soft-cap) and the typed and ring forms
// of the KV append.
// Each is one launch with no hand-off. Inside a decode step, positions come from the step's
// device values (step_dev_), so a captured graph replays at the new position.
#include "backend/cuda/cuda-backend-impl.h"

namespace hearth::cuda_impl {

uint32_t CudaBackend::features() const {
  return kQkNorm | kGeluGated | kMaskedAttention | kPartialRope | kScaleOps | kAttentionSinks |
         kMoe | kClampedSwiglu;
}

const int32_t* CudaBackend::step_pos_or_null(int64_t n_tokens, int64_t pos, const char* op) {
  if (stepping() && n_tokens == 1 && pos == step_host_->pos) return &step_dev_->pos;
  if (capturing())
    fail(std::string(op) + " inside a decode step must be one token at the step's position");
  return nullptr;
}

void CudaBackend::rmsnorm_heads(float* x, const float* w, int64_t rows, int64_t head_dim,
                                float eps) {
  unfused_op("rmsnorm (heads)", "rmsnorm_heads",
             [&] { return cuda::launch_rmsnorm(x, w, x, rows, head_dim, eps, stream_); });
}

void CudaBackend::attention_masked(const float* q, const kernels::KvRows& k,
                                   const kernels::KvRows& v, float* out, int64_t n_tokens,
                                   int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                                   int64_t head_dim, float scale,
                                   const kernels::AttentionMask& mask) {
  // Sinks alone (gpt-oss's full layers) keep the split-K decode and tensor-core prefill kernels;
  // one token's window, ring and soft-cap go to the decode kernels where they take the rows.
  if ((mask.window == 0 && mask.softcap == 0 && mask.ring_rows == 0) ||
      decode_kernel_masks(n_tokens, head_dim, k, v, mask))
    return launch_attention_op(q, k, v, out, n_tokens, pos0, n_heads, n_kv_heads, head_dim, scale,
                               nullptr, mask);
  const int32_t* pos0_dev = step_pos_or_null(n_tokens, pos0, "attention_masked");
  if (!error_.is_ok()) return;
  const int m = prof("attention (masked)");
  check(cuda::launch_attention_masked(q, k.data, v.data, out, n_tokens, pos0, pos0_dev, n_heads,
                                      n_kv_heads, head_dim, scale, mask.window, mask.softcap,
                                      mask.ring_rows, stream_,
                                      cuda::AttnKv{k.type, v.type, mask.sinks}),
        "attention_masked");
  unprof(m);
}

void CudaBackend::rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                               int64_t n_rot, const int32_t* pos, const float* inv_freq,
                               kernels::RopeStyle style, float mscale) {
  if (n_tokens <= 0) return;
  const float* freq = device_freqs(inv_freq, n_rot / 2);
  if (!freq) return;
  const int32_t* dev_pos = step_pos_or_null(n_tokens, pos[0], "rope_partial");
  if (!error_.is_ok()) return;
  if (!dev_pos) dev_pos = static_cast<const int32_t*>(stage_small(pos, size_t(n_tokens) * 4));
  if (!dev_pos) return;
  const int st = style == kernels::RopeStyle::kInterleaved ? 0 : 1;
  const int m = prof("rope");
  check(cuda::launch_rope_partial(x, n_tokens, n_heads, head_dim, n_rot, dev_pos, freq, st, mscale,
                                  stream_),
        "rope_partial");
  unprof(m);
}

void CudaBackend::gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) {
  gated(Gate::kGeluTanh, gate, up, out, n);  // (cuda-backend-ops.cpp, beside swiglu)
}

void CudaBackend::softcap(float* x, int64_t n, float cap) {
  unfused_op("softcap", "softcap", [&] { return cuda::launch_softcap(x, n, cap, stream_); });
}

void CudaBackend::scale(float* x, int64_t n, float s) {
  unfused_op("scale", "scale", [&] { return cuda::launch_scale(x, n, s, stream_); });
}

void CudaBackend::store_kv_typed(void* cache, DType type, const float* src, int64_t pos,
                                 int64_t row_floats, int64_t n_tokens, int64_t ring_rows) {
  const int32_t* pos_dev = step_pos_or_null(n_tokens, pos, "store_kv");
  if (!error_.is_ok()) return;
  const int m = prof("kv store");
  check(cuda::launch_store_kv(cache, type, src, pos_dev, pos, row_floats, n_tokens, ring_rows,
                              stream_),
        "store_kv");
  unprof(m);
}

}  // namespace hearth::cuda_impl
