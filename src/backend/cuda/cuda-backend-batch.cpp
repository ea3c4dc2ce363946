// The CUDA backend's decode rows of many sequences (a Phase::kDecodeBatch step, or the decode
// rows of a prefill pass that also carries prompt chunks): rope_append_attend_batch runs every
// segment's RoPE, K/V append and attention from per-segment descriptors (cache rows, position)
// staged to device memory once per layer, as one launch where the attention kernel takes the
// rotation and the append too (attention_batch_takes_rope: the decode kernels, with Qwen3's
// q / k norms, for GQA, q8_0 rows and sliding, soft-capped and sink layers; the merged warp
// form for MHA), else a RoPE + append launch and the attention (plus the chunked kernel's
// combine). In a decode step the attention also writes the O projection's fp16 x. The batched
// matmuls are cuda-backend-ops.cpp's (launch_gemvs).
#include "backend/cuda/cuda-backend-impl.h"
#include "kernels/cuda/attention-decode.cuh"

namespace hearth::cuda_impl {

void CudaBackend::rope_append_attend_batch(const AttentionBlock& a) {
  // One cache type for every segment's K and V (one model's caches; a -ctk/-ctv pair that
  // differs takes the per-segment path), and one ring size (one layer's).
  const DType type = a.segments.empty() ? DType::F32 : a.segments[0].k_type;
  const int64_t ring = a.segments.empty() ? 0 : a.segments[0].ring_rows;
  // Sinks, a sliding window and its ring, a soft-cap: only the decode kernels take them
  // (launch_attention_batch runs those for such a step). YaRN's mscale rides in the rotation; a
  // partial rotation takes the per-segment path.
  constexpr int64_t kIntMax = 0x7fffffff;  // (AttnKv's fields)
  const bool masked = a.window > 0 || a.softcap != 0 || a.sinks || ring > 0;
  bool batch = opt_.fuse && !stepping() && !capturing() && a.segments.size() > 1 &&
               (!a.rope.partial || a.rope.n_rot == a.head_dim) &&
               cuda::attention_batch_supported(a.head_dim, a.n_heads, a.n_kv_heads) &&
               (!masked ||
                (cuda::attention_decode_batch_supported(a.head_dim, type) && a.window <= kIntMax &&
                 ring <= kIntMax && (ring == 0 || (a.window > 0 && a.window <= ring))));
  for (const KvSegment& s : a.segments)
    batch = batch && s.n_tokens == 1 && s.ring_rows == ring && s.k_type == type && s.v_type == type;
  if (!batch) return rope_append_attend(a);
  std::vector<cuda::AttnSegment> segs;
  segs.reserve(a.segments.size());
  int64_t max_ctx = 0;
  for (const KvSegment& s : a.segments) {
    segs.push_back({s.k_cache, s.v_cache, int32_t(s.pos0)});
    max_ctx = std::max(max_ctx, s.pos0 + 1);
  }
  const int64_t n = int64_t(segs.size());
  const float* freq = device_freqs(a.rope.inv_freq, a.head_dim / 2);
  const auto* dev_segs = static_cast<const cuda::AttnSegment*>(
      stage_small(segs.data(), segs.size() * sizeof(cuda::AttnSegment)));
  const size_t need =
      size_t(cuda::attention_batch_partials_floats(n, a.n_heads, a.head_dim, max_ctx)) * 4;
  const size_t cap_before = batch_partials_.bytes;
  if (!freq || !dev_segs || !ensure(batch_partials_, need, "batch attention partials")) return;
  // The decode kernels' per-row counters (at the front of the partials) start at zero and are
  // left at zero by every launch; a new buffer or a new row count needs them zeroed once.
  const int64_t rows = n * a.n_heads;
  if (batch_partials_.bytes != cap_before || rows != batch_partials_rows_) {
    const size_t words = size_t(cuda::attention_counter_slots(n, a.n_heads)) * 4;
    if (!check(cudaMemsetAsync(batch_partials_.ptr, 0, std::min(words, batch_partials_.bytes),
                               stream_),
               "batch attention partials"))
      return;
    batch_partials_rows_ = rows;
  }
  const int style = a.rope.style == kernels::RopeStyle::kInterleaved ? 0 : 1;
  cuda::AttnRope rope{a.k, a.v, freq, style, a.q_norm, a.k_norm, a.norm_eps};
  rope.mscale = a.rope.mscale;
  const bool fused = cuda::attention_batch_takes_rope(n, a.n_heads, a.n_kv_heads, a.head_dim, type,
                                                      max_ctx, masked, rope);
  if (!fused) {
    rope = {};
    norm_heads(a);
    const int m = prof("rope+kv store");
    const bool ok = check(
        cuda::launch_rope_kv_batch(a.q, a.n_heads, a.k, a.n_kv_heads, a.v, a.head_dim, dev_segs, n,
                                   type, freq, style, stream_, int(ring), a.rope.mscale),
        "rope+kv (decode batch)");
    unprof(m);
    if (!ok) return;
  }
  // The output feeds the O projection: in a decode step whose matmuls take the fp16 batched
  // form, the combine also writes that form (no conversion launch before the O projection).
  const int64_t width = a.n_heads * a.head_dim;
  void* xh = nullptr;
  if (batch_pass_ && n == pass_tokens_ && half_output(n, width) &&
      ensure(batch_xh_, cuda::batch_x_half_bytes(n, width), "batch fp16 activations"))
    xh = batch_xh_.ptr;
  const int m = prof("attention");
  if (check(cuda::launch_attention_batch(
                a.q, a.out, dev_segs, n, max_ctx, a.n_heads, a.n_kv_heads, a.head_dim, type,
                a.scale, batch_partials_.as<float>(), stream_, xh, cuda::BatchAttnKernel::kChosen,
                0, cuda::AttnKv{type, type, a.sinks, int(a.window), int(ring), a.softcap}, rope),
            "attention (decode batch)") &&
      xh)
    hand_off_xh(a.out, n, width);
  unprof(m);
}

}  // namespace hearth::cuda_impl
