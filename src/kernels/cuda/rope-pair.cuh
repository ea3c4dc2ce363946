// The rotation the CUDA rope kernels (rope.cu per element, rope-prefill.cu per token) apply to
// one pair of a head's elements, so they cannot drift apart (fused.cu also stores the pair to
// the K cache, so it keeps its own indices). A new rope style: its pair indexing here.
#pragma once

#include <cstdint>

namespace hearth::cuda {

// Rotates pair i (of half = head_dim / 2) of head vector v by the angle whose cosine and sine
// are c and s. style 0 (interleaved): elements (2i, 2i+1); style 1 (halves): (i, i + half).
// copy_to, when set, receives the rotated pair at the same indices too (a K cache row).
__device__ __forceinline__ void rope_rotate_pair(float* v, int64_t i, int64_t half, int style,
                                                 float c, float s, float* copy_to = nullptr) {
  const int64_t a = style == 0 ? 2 * i : i;
  const int64_t b = style == 0 ? 2 * i + 1 : i + half;
  const float x0 = v[a], x1 = v[b];
  const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
  v[a] = r0;
  v[b] = r1;
  if (copy_to) copy_to[a] = r0, copy_to[b] = r1;
}

}  // namespace hearth::cuda
