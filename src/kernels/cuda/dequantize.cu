// Weight layout on the device: the packed layout table, the raw-ggml -> packed repack kernel, and
// dequantizing kernels (embedding rows to f32, whole matrices to fp16 for the tensor-core GEMM).
// New dtype: a row in layout_of(), a case in the repack kernel, and dq8<> in quant-device.cuh.
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/kernel-modules.cuh"

namespace hearth::cuda {

namespace {

struct LayoutRow {
  DType t;
  int block;       // elements per block
  int raw_bytes;   // ggml block bytes
  int body_bytes;  // packed body bytes per block (16-byte multiple)
  bool aux0, aux1, aux16;
  bool head = false;  // a 16-byte head per block in its own array
};

// clang-format off
constexpr LayoutRow kLayouts[] = {
  {DType::F32,  1,   4,   4,   false, false, false},
  {DType::F16,  1,   2,   2,   false, false, false},
  {DType::BF16, 1,   2,   2,   false, false, false},
  {DType::Q8_0, 32,  34,  32,  false, false, true},
  {DType::Q4_0, 32,  18,  16,  false, false, true},
  {DType::Q4_1, 32,  20,  16,  true,  false, false},
  {DType::Q5_0, 32,  22,  16,  true,  false, true},
  {DType::Q5_1, 32,  24,  16,  true,  true,  false},
  // Q4_K: the 128 quant bytes stay in the body, so a warp's units are contiguous there (16-byte
  // loads, no head bytes between them); the head moves to its own array.
  {DType::Q4_K, 256, 144, 128, false, false, false, true},
  {DType::Q5_K, 256, 176, 176, false, false, false},
  {DType::Q6_K, 256, 210, 208, false, false, true},
  // MXFP4: the scale byte e moves to aux16, the 16 code bytes stay as Q4_0's.
  {DType::MXFP4, 32, 17,  16,  false, false, true},
};
// clang-format on

const LayoutRow* layout_of(DType t) {
  for (const auto& r : kLayouts)
    if (r.t == t) return &r;
  return nullptr;
}

size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

__device__ __forceinline__ uint32_t load_u32_bytes(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// One thread per block: split the ggml block into body / aux arrays (byte loads: raw blocks of
// 18, 20, 22, 34 or 210 bytes have no alignment to exploit, and this runs once per weight;
// Q4_K's 144 bytes do).
template <DType T>
__global__ void repack_kernel(const uint8_t* raw, uint8_t* body, uint32_t* aux0, uint32_t* aux1,
                              uint16_t* aux16, uint8_t* head, int64_t n_blocks) {
  const int64_t bi = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (bi >= n_blocks) return;
  constexpr int kRaw = T == DType::Q8_0    ? 34
                       : T == DType::Q4_0  ? 18
                       : T == DType::Q4_1  ? 20
                       : T == DType::Q5_0  ? 22
                       : T == DType::Q5_1  ? 24
                       : T == DType::Q4_K  ? 144
                       : T == DType::MXFP4 ? 17
                                           : 210;
  const uint8_t* src = raw + bi * kRaw;
  auto copy_body = [&](int from, int n, int body_bytes) {
    uint8_t* dst = body + bi * body_bytes;
    for (int i = 0; i < n; ++i) dst[i] = src[from + i];
  };
  if constexpr (T == DType::Q8_0) {
    aux16[bi] = uint16_t(src[0] | (src[1] << 8));
    copy_body(2, 32, 32);
  } else if constexpr (T == DType::Q4_0) {
    aux16[bi] = uint16_t(src[0] | (src[1] << 8));
    copy_body(2, 16, 16);
  } else if constexpr (T == DType::Q4_1) {
    aux0[bi] = load_u32_bytes(src);
    copy_body(4, 16, 16);
  } else if constexpr (T == DType::Q5_0) {
    aux16[bi] = uint16_t(src[0] | (src[1] << 8));
    aux0[bi] = load_u32_bytes(src + 2);
    copy_body(6, 16, 16);
  } else if constexpr (T == DType::Q5_1) {
    aux1[bi] = load_u32_bytes(src);
    aux0[bi] = load_u32_bytes(src + 4);
    copy_body(8, 16, 16);
  } else if constexpr (T == DType::Q4_K) {  // 144-byte blocks: 16-byte aligned, 9 words
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    reinterpret_cast<uint4*>(head)[bi] = s4[0];
    uint4* b4 = reinterpret_cast<uint4*>(body + bi * 128);
    for (int i = 0; i < 8; ++i) b4[i] = s4[1 + i];
  } else if constexpr (T == DType::MXFP4) {
    aux16[bi] = src[0];
    copy_body(1, 16, 16);
  } else {  // Q6_K: ql, qh, scales stay together; d moves out
    aux16[bi] = uint16_t(src[208] | (src[209] << 8));
    copy_body(0, 208, 208);
  }
}

template <DType T>
__global__ void embed_kernel(DeviceWeight w, const int32_t* ids, float* out) {
  const int64_t t = blockIdx.y;
  const int64_t row = ids[t];
  const int64_t ng = w.cols / 8;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < ng;
       g += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    dq8<T>(w, row, g, v);
    float4* o = reinterpret_cast<float4*>(out + t * w.cols + g * 8);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// Plain types whose row length is not a multiple of 8: element at a time.
__global__ void embed_plain_kernel(DeviceWeight w, const int32_t* ids, float* out) {
  const int64_t t = blockIdx.y;
  const int64_t base = int64_t(ids[t]) * w.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < w.cols;
       i += int64_t(gridDim.x) * blockDim.x)
    out[t * w.cols + i] = plain_at(w, base + i);
}

template <DType T>
__global__ void to_f16_kernel(DeviceWeight w, __half* out) {
  const int64_t ng_row = w.cols / 8, ng = w.rows * ng_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < ng;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    dq8<T>(w, i / ng_row, i % ng_row, v);
    __align__(16) __half h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) h[k] = __float2half_rn(v[k]);
    reinterpret_cast<uint4*>(out)[i] = *reinterpret_cast<const uint4*>(h);
  }
}

__global__ void plain_to_f16_kernel(DeviceWeight w, __half* out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(plain_at(w, i));
}

__global__ void f32_to_f16_kernel(const float* x, __half* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 65535 * 4 ? (blocks > 0 ? blocks : 1) : 65535 * 4);
}

}  // namespace

bool supports_dtype(DType t) {
  return layout_of(t) != nullptr;
}

PackedLayout packed_layout(DType t, int64_t rows, int64_t cols) {
  PackedLayout p;
  const LayoutRow* r = layout_of(t);
  if (!r) return p;
  const size_t blocks = size_t(rows) * size_t(cols / r->block);
  size_t off = align256(blocks * r->body_bytes);
  p.needs_repack = r->body_bytes != r->raw_bytes;
  if (r->aux0) p.aux0_offset = off, off = align256(off + blocks * 4);
  if (r->aux1) p.aux1_offset = off, off = align256(off + blocks * 4);
  if (r->aux16) p.aux16_offset = off, off = align256(off + blocks * 2);
  if (r->head) p.head_offset = off, off = align256(off + blocks * 16);
  p.total_bytes = off;
  return p;
}

DeviceWeight make_device_weight(DType t, int64_t rows, int64_t cols, const uint8_t* packed) {
  DeviceWeight w;
  const LayoutRow* r = layout_of(t);
  const PackedLayout p = packed_layout(t, rows, cols);
  w.dtype = t;
  w.rows = rows;
  w.cols = cols;
  w.blocks_per_row = r ? cols / r->block : 0;
  w.body = packed;
  if (r && r->aux0) w.aux0 = reinterpret_cast<const uint32_t*>(packed + p.aux0_offset);
  if (r && r->aux1) w.aux1 = reinterpret_cast<const uint32_t*>(packed + p.aux1_offset);
  if (r && r->aux16) w.aux16 = reinterpret_cast<const uint16_t*>(packed + p.aux16_offset);
  if (r && r->head) w.aux_head = reinterpret_cast<const uint4*>(packed + p.head_offset);
  return w;
}

cudaError_t launch_repack(DType t, const uint8_t* raw, uint8_t* packed, int64_t rows, int64_t cols,
                          cudaStream_t s) {
  const LayoutRow* r = layout_of(t);
  if (!r) return cudaErrorInvalidValue;
  const PackedLayout p = packed_layout(t, rows, cols);
  const int64_t n_blocks = rows * (cols / r->block);
  if (!p.needs_repack)
    return cudaMemcpyAsync(packed, raw, size_t(n_blocks) * r->raw_bytes, cudaMemcpyDeviceToDevice,
                           s);
  auto* aux0 = reinterpret_cast<uint32_t*>(packed + p.aux0_offset);
  auto* aux1 = reinterpret_cast<uint32_t*>(packed + p.aux1_offset);
  auto* aux16 = reinterpret_cast<uint16_t*>(packed + p.aux16_offset);
  uint8_t* head = packed + p.head_offset;
  const unsigned grid = unsigned((n_blocks + 255) / 256);
  switch (t) {
#define HEARTH_REPACK(T)                                                                   \
  case T:                                                                                  \
    repack_kernel<T><<<grid, 256, 0, s>>>(raw, packed, aux0, aux1, aux16, head, n_blocks); \
    break;
    HEARTH_REPACK(DType::Q8_0)
    HEARTH_REPACK(DType::Q4_0)
    HEARTH_REPACK(DType::Q4_1)
    HEARTH_REPACK(DType::Q5_0)
    HEARTH_REPACK(DType::Q5_1)
    HEARTH_REPACK(DType::Q4_K)
    HEARTH_REPACK(DType::Q6_K)
    HEARTH_REPACK(DType::MXFP4)
#undef HEARTH_REPACK
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_embed(const DeviceWeight& w, const int32_t* ids, int64_t n_tokens, float* out,
                         cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  const unsigned per_row = grid_for(w.cols % 8 == 0 ? w.cols / 8 : w.cols, 128);
  const dim3 grid(per_row > 64 ? 64 : per_row, unsigned(n_tokens));
  if (w.cols % 8 != 0) {
    embed_plain_kernel<<<grid, 128, 0, s>>>(w, ids, out);
    return cudaGetLastError();
  }
  if (!dispatch_dtype(w.dtype, [&](auto tag) {
        embed_kernel<decltype(tag)::value><<<grid, 128, 0, s>>>(w, ids, out);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_weight_to_f16(const DeviceWeight& w, __half* out, cudaStream_t s) {
  const int64_t n = w.rows * w.cols;
  if (w.cols % 8 != 0) {
    plain_to_f16_kernel<<<grid_for(n, 256), 256, 0, s>>>(w, out);
    return cudaGetLastError();
  }
  if (!dispatch_dtype(w.dtype, [&](auto tag) {
        to_f16_kernel<decltype(tag)::value><<<grid_for(n / 8, 256), 256, 0, s>>>(w, out);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

size_t weight_half_copy_bytes(const DeviceWeight& w) {
  const bool quantized = w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16 &&
                         supports_dtype(w.dtype);
  return quantized && w.rows > 0 && w.cols % 8 == 0 ? size_t(w.rows) * w.cols * 2 : 0;
}

cudaError_t launch_weight_half_copy(const DeviceWeight& w, void* out, cudaStream_t s) {
  if (weight_half_copy_bytes(w) == 0) return cudaErrorInvalidValue;
  return launch_weight_to_f16(w, static_cast<__half*>(out), s);
}

cudaError_t launch_f32_to_f16(const float* x, __half* y, int64_t n, cudaStream_t s) {
  f32_to_f16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, y, n);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
