// The CUDA backend's RoPE, K/V append and attention (cuda-backend-impl.h), and the named fused op
// over them, rope_append_attend. Inside a decode step positions come from the step's device
// values (step_dev_), so a captured graph replays at the new position.
#include "backend/cuda/cuda-backend-impl.h"
#include "kernels/cuda/attention-decode.cuh"

namespace hearth::cuda_impl {

namespace {

int style_code(kernels::RopeStyle style) {
  return style == kernels::RopeStyle::kInterleaved ? 0 : 1;
}

}  // namespace

void CudaBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                       const int32_t* pos, const float* inv_freq, kernels::RopeStyle style) {
  const float* freq = device_freqs(inv_freq, head_dim / 2);
  if (freq) launch_rope(x, n_tokens, n_heads, head_dim, pos, freq, style_code(style));
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

void CudaBackend::store_kv(void* rows, DType type, const float* src, int64_t pos,
                           int64_t row_floats, int64_t n_tokens, int64_t ring_rows) {
  if (ring_rows > 0 || type != DType::F32)
    return store_kv_typed(rows, type, src, pos, row_floats, n_tokens, ring_rows);
  float* const cache = static_cast<float*>(rows);
  const int m = prof("kv store");
  if (capturing() || (stepping() && n_tokens == 1 && pos == step_host_->pos)) {
    if (n_tokens != 1 || pos != step_host_->pos)
      fail("store_kv inside a decode step must be one token at the step's position");
    else
      check(cuda::launch_store_rows(cache, src, &step_dev_->pos, row_floats, 1, stream_),
            "store_kv");
  } else {
    check(cudaMemcpyAsync(cache + pos * row_floats, src, size_t(n_tokens * row_floats) * 4,
                          cudaMemcpyDeviceToDevice, stream_),
          "store_kv");
  }
  unprof(m);
}

void CudaBackend::launch_attention_op(const float* q, const kernels::KvRows& k,
                                      const kernels::KvRows& v, float* out, int64_t n_tokens,
                                      int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                                      int64_t head_dim, float scale,
                                      const cuda::AttnRope* fused_rope,
                                      const kernels::AttentionMask& mask) {
  // Inside a decode step the split grid covers the whole cache, so one graph serves every pos.
  const bool step = stepping();
  if (capturing() && (n_tokens != 1 || pos0 != step_host_->pos))
    return fail("attention inside a decode step must be one token at the step's position");
  const int64_t max_ctx = step ? step_capacity_ : pos0 + n_tokens;
  const int32_t* pos0_dev =
      step && n_tokens == 1 && pos0 == step_host_->pos ? &step_dev_->pos : nullptr;
  const int64_t need =
      cuda::attention_partials_floats(n_tokens, n_heads, head_dim, max_ctx) * int64_t(4);
  const size_t cap_before = partials_.bytes;
  if (!ensure(partials_, size_t(need), "partials")) return;
  // The split kernel's per-row counters (at the front of partials) start at zero and are left
  // at zero by every launch; a new buffer or a new row count needs them zeroed once.
  const int64_t rows = n_tokens * n_heads;
  if (need > 0 && (partials_.bytes != cap_before || rows != partials_rows_)) {
    const size_t slots = size_t(cuda::attention_counter_slots(n_tokens, n_heads)) * 4;
    if (!check(cudaMemsetAsync(partials_.ptr, 0, std::min(slots, partials_.bytes), stream_),
               "partials"))
      return;
    partials_rows_ = rows;
  }
  // The output feeds the O projection: its combine pass also quantizes it.
  const int64_t width = n_heads * head_dim;
  const bool quant =
      quantize_output(n_tokens, width) && head_dim % 32 == 0 &&
      ensure(xq_buf_, cuda::quantized_acts_bytes(n_tokens, width), "quantized activations");
  const int m = prof("attention");
  const cuda::AttnKv kv{k.type,      v.type, mask.sinks, int(mask.window), int(mask.ring_rows),
                        mask.softcap};
  if (check(cuda::launch_attention(q, k.data, v.data, out, n_tokens, pos0, pos0_dev, max_ctx,
                                   n_heads, n_kv_heads, head_dim, scale, partials_.as<float>(),
                                   stream_, quant ? xq_buf_.ptr : nullptr, fused_rope, kv),
            "attention") &&
      quant)
    hand_off_xq(out, n_tokens, width);
  unprof(m);
}

bool CudaBackend::decode_kernel_masks(int64_t n_tokens, int64_t head_dim, const kernels::KvRows& k,
                                      const kernels::KvRows& v,
                                      const kernels::AttentionMask& mask) {
  constexpr int64_t kIntMax = 0x7fffffff;  // (AttnKv's fields)
  return n_tokens == 1 && mask.window <= kIntMax && mask.ring_rows <= kIntMax &&
         (mask.ring_rows == 0 || (mask.window > 0 && mask.window <= mask.ring_rows)) &&
         cuda::attention_decode_supported(head_dim, k.type, v.type, k.data, v.data);
}

void CudaBackend::rope_append_attend(const AttentionBlock& a) {
  if (!opt_.fuse || a.segments.size() != 1) return Backend::rope_append_attend(a);
  const KvSegment& s = a.segments[0];
  const kernels::KvRows k_rows{s.k_cache, s.k_type}, v_rows{s.v_cache, s.v_type};
  const kernels::AttentionMask mask{a.window, a.softcap, s.ring_rows, a.sinks};
  const int style = style_code(a.rope.style);
  const bool step_token = stepping() && a.n_tokens == 1 && s.pos0 == step_host_->pos;
  // A window, a ring, a soft-cap or a scaled rotation (YaRN's mscale over every dim; a partial
  // rotation is never fused) only through the fused decode step: the decode kernels take them.
  const bool masked = a.window > 0 || a.softcap != 0 || s.ring_rows > 0;
  const bool fused_step =
      step_token && cuda::attention_rope_fusable(1, a.head_dim, style) && !a.q_norm == !a.k_norm &&
      (!a.rope.partial || a.rope.n_rot == a.head_dim) &&
      ((!masked && !a.rope.partial) || decode_kernel_masks(1, a.head_dim, k_rows, v_rows, mask));
  if (!fused_step && (masked || a.rope.partial)) return Backend::rope_append_attend(a);
  const float* freq = device_freqs(a.rope.inv_freq, a.head_dim / 2);
  if (!freq) return;
  if (fused_step) {
    // One launch: q and this token's k normed (per head), rotated, k and v appended, inside
    // the attention kernel.
    cuda::AttnRope fused{a.k, a.v, freq, style, a.q_norm, a.k_norm, a.norm_eps};
    fused.mscale = a.rope.mscale;
    return launch_attention_op(a.q, k_rows, v_rows, a.out, 1, s.pos0, a.n_heads, a.n_kv_heads,
                               a.head_dim, a.scale, &fused, mask);
  }
  const bool f32 = s.k_type == DType::F32 && s.v_type == DType::F32;
  if (step_token) {
    if (!f32) return Backend::rope_append_attend(a);  // rope, typed store_kv, attention
    norm_heads(a);
    float* const k_cache = static_cast<float*>(s.k_cache);
    float* const v_cache = static_cast<float*>(s.v_cache);
    const int m = prof("rope+kv store");
    check(cuda::launch_rope_kv(a.q, a.n_heads, a.k, a.n_kv_heads, a.head_dim, &step_dev_->pos, freq,
                               style, k_cache, v_cache, a.v, stream_),
          "rope+kv");
    unprof(m);
  } else if (opt_.rope_rows_kv && !stepping() && !capturing() &&
             a.n_tokens > cuda::kGemvMaxTokens) {
    norm_heads(a);
    launch_rope_rows_kv(a, s, freq, style);
  } else {
    return Backend::rope_append_attend(a);
  }
  launch_attention_op(a.q, k_rows, v_rows, a.out, a.n_tokens, s.pos0, a.n_heads, a.n_kv_heads,
                      a.head_dim, a.scale, nullptr, mask);
}

void CudaBackend::launch_rope_rows_kv(const AttentionBlock& a, const KvSegment& s,
                                      const float* freq, int style) {
  const int m = prof("rope+kv store");
  const int64_t T = a.n_tokens;
  const AngleTable* table = nullptr;
  for (const AngleTable& t : angle_tables_)
    if (int64_t(t.pos.size()) == T && t.freq == freq && t.head_dim == a.head_dim &&
        t.version == freqs_version_ && std::equal(a.host_pos, a.host_pos + T, t.pos.begin()))
      table = &t;
  if (!table) {
    AngleTable& t = angle_tables_[next_angle_table_];
    next_angle_table_ = (next_angle_table_ + 1) % kAngleTables;
    t.pos.clear();
    const auto* dev_pos = static_cast<const int32_t*>(stage_small(a.host_pos, size_t(T) * 4));
    // (Sized for a whole pass at once: a table grown later waits for the device.)
    const size_t bytes = cuda::rope_angles_bytes(std::max<int64_t>(T, 512), a.head_dim);
    if (!dev_pos || !ensure(t.cs, bytes, "rope angles") ||
        !check(cuda::launch_rope_angles(t.cs.as<float>(), T, a.head_dim, dev_pos, freq, stream_),
               "rope angles"))
      return unprof(m);
    t.pos.assign(a.host_pos, a.host_pos + T);
    t.freq = freq, t.head_dim = a.head_dim, t.version = freqs_version_;
    table = &t;
  }
  check(cuda::launch_rope_rows_kv(a.q, a.n_heads, a.k, a.n_kv_heads, a.head_dim, T,
                                  table->cs.as<float>(), style, s.k_cache, s.v_cache, a.v, s.pos0,
                                  stream_, cuda::AttnKv{s.k_type, s.v_type}),
        "rope+kv");
  unprof(m);
}

}  // namespace hearth::cuda_impl
