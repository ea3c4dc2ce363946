// hearth-persistent-probe: how fast one decode token's weight stream could go as ONE persistent
// kernel instead of a graph of launches. A design probe for the "persistent layer kernel" that
// docs/performance-cuda.md (Known gaps) names as the lever left for single-stream decode; it is
// not used by the engine. The figures it gave, and what they mean: docs/history/cuda.md,
// 2026-12-06 (session 57).
//
// The model is llama2-7b's weight stream in Q4_0 (32 layers of Q/K/V, O, gate/up and down, then
// the LM head), random weights, stored row-contiguous (each row: cols/2 bytes of nibbles, then
// cols/32 fp16 scales). One block per SM; warp 0 streams the block's rows of every phase through
// a ring of shared-memory stages with bulk copies (TMA), running ahead across phase boundaries
// (the weights depend on nothing); 16 consumer warps dot the rows with x quantized to int8 groups
// of 32, each lane holding its columns of x in registers. Between phases the grid meets at a
// barrier (a counter in global memory), then every block prepares the next x itself (rmsnorm +
// int8 quantization of the residual read from L2). Attention is a stand-in phase (q passed
// through) so that a layer has the barriers a real one needs.
//
// Usage: hearth-persistent-probe [--layers N] [--reps R] [--stages S] [--l2-ahead D]
// Prints a check against a one-kernel-per-step reference (same arithmetic), the read bandwidth,
// then ms/token for each variant, alternating R rounds: "stream" (no dots, no x, no waits: the
// ceiling), "dots" (+ the dot products), "dots+x" (+ each block's x preparation), "full" (+ the
// grid barriers), "full-relaxed" (barrier arrivals without release order: NOT a correct barrier,
// it only measures what the release costs).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

#define PROBE_CHECK(x)                                                                \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kHidden = 4096, kFf = 11008, kVocab = 32000;
constexpr int kConsumerWarps = 16;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kRingBytes = 204800, kMaxStages = 8;  // the ring: 200 KiB of the SM's 227
constexpr int kMaxShare = 512;                      // rows a block may own in one phase

enum Kind { kQkv, kAttention, kOut, kGateUp, kDown, kHead };
enum XSource { kNormedResidual, kAttentionOut, kFfn, kNone };
// Variant switches.
enum : int { kNoDots = 1, kNoWait = 2, kNoX = 4, kRelaxed = 8 };

struct Phase {
  const uint8_t* w;                               // nullptr: a phase without weights
  int rows, cols, kind, x_source, rows_per_unit;  // rows_per_unit 2: gate/up rows interleaved
  const float* norm_w;
};

// The ring's shape and how far ahead the producer asks L2 for chunks (0: no L2 prefetch).
struct Ring {
  int stages, stage_bytes, l2_ahead;
};

struct Buffers {
  float *residual, *qkv, *attention, *ffn, *logits;
  unsigned* arrivals;  // the grid barrier's counter
};

__host__ __device__ int row_bytes(int cols) {
  return cols / 2 + cols / 32 * 2;
}
// Warps that share a row, so a lane holds at most 4 blocks of x.
__host__ __device__ int warps_per_row(int cols) {
  const int blocks = cols / 32;
  return blocks <= 128 ? 1 : blocks <= 256 ? 2 : blocks <= 512 ? 4 : 8;
}
// Rows a stage holds: a multiple of the rows the consumer warps take at once.
// (At least one row: a stage smaller than the rows taken at once leaves warps idle.)
__host__ __device__ int chunk_rows(const Phase& p, int stage_bytes) {
  const int at_once = kConsumerWarps / warps_per_row(p.cols), rb = row_bytes(p.cols);
  const int sets = stage_bytes / (at_once * rb);
  return sets > 0 ? at_once * sets : stage_bytes / rb;
}
// Block b's rows of a phase (whole units, spread evenly).
__host__ __device__ void block_share(const Phase& p, int b, int nb, int& r0, int& r1) {
  const int units = p.rows / p.rows_per_unit;
  r0 = int(int64_t(units) * b / nb) * p.rows_per_unit;
  r1 = int(int64_t(units) * (b + 1) / nb) * p.rows_per_unit;
}

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void barrier_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(b)), "r"(count));
}
__device__ __forceinline__ void expect_bytes(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_addr(b)) : "memory");
}
__device__ __forceinline__ void wait_parity(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_addr(b)), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src, uint32_t bytes,
                                               uint64_t* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_addr(dst)),
      "l"(src), "r"(bytes), "r"(shared_addr(b))
      : "memory");
}
// The consumer warps only (named barrier 1).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// n values of src (n % 256 == 0), rms-normalised with w when w is given, to int8 groups of 32:
// xq, xd (the group's scale), xs (the sum of its int8 values, for Q4_0's -8 offset). Run by the
// kConsumers threads (index ct); uses red[kConsumerWarps].
__device__ void prepare_x(const float* src, int n, const float* w, int8_t* xq, float* xd, int* xs,
                          float* red, int ct) {
  const int lane = ct & 31, warp = ct >> 5;
  float scale = 1.f;
  if (w) {
    float ss = 0.f;
    for (int e = ct * 8; e < n; e += kConsumers * 8) {
      const float4 a = __ldcg(reinterpret_cast<const float4*>(src + e));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(src + e + 4));
      ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z +
            b.w * b.w;
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if (lane == 0) red[warp] = ss;
    consumers_sync();
    float total = 0.f;
    for (int i = 0; i < kConsumerWarps; ++i) total += red[i];
    scale = rsqrtf(total / n + 1e-5f);
  }
  for (int base = warp * 256; base < n; base += kConsumers * 8) {
    const int e = base + lane * 8;
    const float4 a = __ldcg(reinterpret_cast<const float4*>(src + e));
    const float4 b = __ldcg(reinterpret_cast<const float4*>(src + e + 4));
    float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (w) v[i] *= scale * w[e + i];
      amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 2));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int sum = 0;
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = __float2int_rn(v[i] * inv);
      sum += q;
      packed[i / 4] |= uint32_t(q & 0xff) << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(xq + e) = make_uint2(packed[0], packed[1]);
    sum += __shfl_xor_sync(~0u, sum, 1);
    sum += __shfl_xor_sync(~0u, sum, 2);
    if ((lane & 3) == 0) xd[e / 32] = amax / 127.f, xs[e / 32] = sum;
  }
}

// One Q4_0 block (16 bytes of nibbles: element k low, k + 16 high) against 32 int8 of x.
__device__ __forceinline__ float q4_dot(uint4 q, float dw, int4 x0, int4 x1, float xd, int xs) {
  int t = 0;
  t = __dp4a(int(q.x & 0x0F0F0F0Fu), x0.x, t);
  t = __dp4a(int(q.y & 0x0F0F0F0Fu), x0.y, t);
  t = __dp4a(int(q.z & 0x0F0F0F0Fu), x0.z, t);
  t = __dp4a(int(q.w & 0x0F0F0F0Fu), x0.w, t);
  t = __dp4a(int((q.x >> 4) & 0x0F0F0F0Fu), x1.x, t);
  t = __dp4a(int((q.y >> 4) & 0x0F0F0F0Fu), x1.y, t);
  t = __dp4a(int((q.z >> 4) & 0x0F0F0F0Fu), x1.z, t);
  t = __dp4a(int((q.w >> 4) & 0x0F0F0F0Fu), x1.w, t);
  return dw * xd * float(t - 8 * xs);
}

__device__ __forceinline__ float silu(float g) {
  return g / (1.f + __expf(-g));
}

__device__ void store_rows(const Phase& ph, int r0, int r1, const float* acc, Buffers bufs,
                           int ct) {
  for (int i = ct; i < r1 - r0; i += kConsumers) {
    const int row = r0 + i;
    switch (ph.kind) {
      case kQkv:
        bufs.qkv[row] = acc[i];
        break;
      case kOut:
      case kDown:
        bufs.residual[row] = __ldcg(bufs.residual + row) + acc[i];
        break;
      case kHead:
        bufs.logits[row] = acc[i];
        break;
      case kGateUp:
        if ((i & 1) == 0) bufs.ffn[row / 2] = silu(acc[i]) * acc[i + 1];
        break;
    }
  }
}

// The producer's walk over a block's chunks, phase after phase.
struct ChunkCursor {
  int p = -1, r = 0, r1 = 0;
  // The next chunk's address and size; false past the last phase.
  __device__ bool next(const Phase* phases, int n_phases, int b, int nb, int stage_bytes,
                       const uint8_t*& at, uint32_t& bytes) {
    while (r >= r1) {
      if (++p >= n_phases) return false;
      if (phases[p].w)
        block_share(phases[p], b, nb, r, r1);
      else
        r = r1 = 0;
    }
    const Phase& ph = phases[p];
    const int rb = row_bytes(ph.cols), n = min(chunk_rows(ph, stage_bytes), r1 - r);
    at = ph.w + size_t(r) * rb;
    bytes = uint32_t(n * rb);
    r += n;
    return true;
  }
};

__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    persistent_kernel(const Phase* phases, int n_phases, Buffers bufs, Ring ring, int variant) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* stages = smem;
  int8_t* xq = reinterpret_cast<int8_t*>(smem + kRingBytes);
  float* xd = reinterpret_cast<float*>(xq + kFf);
  int* xs = reinterpret_cast<int*>(xd + kFf / 32);
  float* acc = reinterpret_cast<float*>(xs + kFf / 32);
  float* red = acc + kMaxShare;
  uint64_t* full = reinterpret_cast<uint64_t*>(red + 32);
  uint64_t* empty = full + kMaxStages;
  const int nb = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ring.stages; ++s)
      barrier_init(&full[s], 1), barrier_init(&empty[s], kConsumerWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp == 0) {  // the producer: every chunk of every phase, in order
    if (lane != 0) return;
    ChunkCursor copy, ahead;
    const uint8_t* at;
    uint32_t bytes;
    for (int i = 0; i < ring.l2_ahead; ++i)
      if (ahead.next(phases, n_phases, b, nb, ring.stage_bytes, at, bytes)) prefetch_l2(at, bytes);
    int s = 0;
    uint32_t parity = 1;  // a fresh barrier's "previous phase" counts as complete
    while (copy.next(phases, n_phases, b, nb, ring.stage_bytes, at, bytes)) {
      const uint8_t* later;
      uint32_t later_bytes;
      if (ring.l2_ahead > 0 &&
          ahead.next(phases, n_phases, b, nb, ring.stage_bytes, later, later_bytes))
        prefetch_l2(later, later_bytes);
      wait_parity(&empty[s], parity);
      expect_bytes(&full[s], bytes);
      copy_to_shared(stages + s * ring.stage_bytes, at, bytes, &full[s]);
      if (++s == ring.stages) s = 0, parity ^= 1;
    }
    return;
  }
  const int ct = threadIdx.x - 32, cw = warp - 1;
  int s = 0;
  uint32_t parity = 0;
  for (int p = 0; p < n_phases; ++p) {
    const Phase ph = phases[p];
    if (p > 0) {
      if (ct == 0 && !(variant & kNoWait)) {
        unsigned seen;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                       : "=r"(seen)
                       : "l"(bufs.arrivals)
                       : "memory");
        } while (seen < unsigned(nb * p));
      }
      consumers_sync();
    }
    int r0 = 0, r1 = 0;
    if (ph.w) {
      block_share(ph, b, nb, r0, r1);
      if (!(variant & kNoX)) {
        if (ph.x_source == kNormedResidual)
          prepare_x(bufs.residual, kHidden, ph.norm_w, xq, xd, xs, red, ct);
        else if (ph.x_source == kAttentionOut)
          prepare_x(bufs.attention, kHidden, nullptr, xq, xd, xs, red, ct);
        else if (ph.x_source == kFfn)
          prepare_x(bufs.ffn, kFf, nullptr, xq, xd, xs, red, ct);
      }
      for (int i = ct; i < r1 - r0; i += kConsumers) acc[i] = 0.f;
      consumers_sync();
      const int rb = row_bytes(ph.cols), nibbles = ph.cols / 2, blocks = ph.cols / 32;
      const int per = chunk_rows(ph, ring.stage_bytes), wpr = warps_per_row(ph.cols);
      const int seg = cw % wpr, seg_blocks = (blocks + wpr - 1) / wpr;
      const int seg_end = min(blocks, (seg + 1) * seg_blocks);
      // This lane's blocks of x: seg * seg_blocks + lane + 32k.
      int4 x0[4], x1[4];
      float x_scale[4];
      int x_sum[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int bb = seg * seg_blocks + lane + 32 * k;
        const bool in = bb < seg_end;
        x0[k] = in ? *reinterpret_cast<const int4*>(xq + bb * 32) : make_int4(0, 0, 0, 0);
        x1[k] = in ? *reinterpret_cast<const int4*>(xq + bb * 32 + 16) : make_int4(0, 0, 0, 0);
        x_scale[k] = in ? xd[bb] : 0.f;
        x_sum[k] = in ? xs[bb] : 0;
      }
      for (int r = r0; r < r1; r += per) {
        const int n = min(per, r1 - r);
        wait_parity(&full[s], parity);
        const uint8_t* stage = stages + s * ring.stage_bytes;
        if (!(variant & kNoDots)) {
          for (int row = cw / wpr; row < n; row += kConsumerWarps / wpr) {
            const uint8_t* wr = stage + row * rb;
            float v = 0.f;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int bb = seg * seg_blocks + lane + 32 * k;
              if (bb < seg_end) {
                const uint4 q = *reinterpret_cast<const uint4*>(wr + bb * 16);
                const float dw =
                    __half2float(*reinterpret_cast<const __half*>(wr + nibbles + bb * 2));
                v += q4_dot(q, dw, x0[k], x1[k], x_scale[k], x_sum[k]);
              }
            }
            for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
            if (lane == 0) {
              if (wpr == 1)
                acc[r - r0 + row] = v;
              else
                atomicAdd(&acc[r - r0 + row], v);
            }
          }
        }
        __syncwarp();
        if (lane == 0) arrive(&empty[s]);
        if (++s == ring.stages) s = 0, parity ^= 1;
      }
      consumers_sync();
      store_rows(ph, r0, r1, acc, bufs, ct);
    } else if (ph.kind == kAttention) {
      // The stand-in: the block's share of the query passed through.
      const int e0 = int(int64_t(kHidden) * b / nb), e1 = int(int64_t(kHidden) * (b + 1) / nb);
      for (int e = e0 + ct; e < e1; e += kConsumers) bufs.attention[e] = __ldcg(bufs.qkv + e);
    }
    consumers_sync();
    if (ct == 0) {
      if (variant & kRelaxed) {
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(bufs.arrivals) : "memory");
      } else {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bufs.arrivals) : "memory");
      }
    }
  }
}

// ---- the reference: the same arithmetic, one kernel per step ----
__global__ void reference_prepare(const float* src, int n, const float* w, int8_t* xq_out,
                                  float* xd_out, int* xs_out) {
  extern __shared__ __align__(16) uint8_t sm[];
  int8_t* xq = reinterpret_cast<int8_t*>(sm);
  float* xd = reinterpret_cast<float*>(sm + kFf);
  int* xs = reinterpret_cast<int*>(xd + kFf / 32);
  float* red = reinterpret_cast<float*>(xs + kFf / 32);
  prepare_x(src, n, w, xq, xd, xs, red, threadIdx.x);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) xq_out[i] = xq[i];
  for (int i = threadIdx.x; i < n / 32; i += blockDim.x) xd_out[i] = xd[i], xs_out[i] = xs[i];
}
__global__ void reference_gemv(const uint8_t* w, int rows, int cols, const int8_t* xq,
                               const float* xd, const int* xs, float* y) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const uint8_t* wr = w + size_t(r) * row_bytes(cols);
  float a = 0.f;
  for (int bb = 0; bb < cols / 32; ++bb) {
    const uint4 q = *reinterpret_cast<const uint4*>(wr + bb * 16);
    const float dw = __half2float(*reinterpret_cast<const __half*>(wr + cols / 2 + bb * 2));
    a += q4_dot(q, dw, *reinterpret_cast<const int4*>(xq + bb * 32),
                *reinterpret_cast<const int4*>(xq + bb * 32 + 16), xd[bb], xs[bb]);
  }
  y[r] = a;
}
__global__ void reference_store(Phase ph, const float* y, Buffers bufs) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (ph.kind == kAttention) {
    if (r < kHidden) bufs.attention[r] = bufs.qkv[r];
    return;
  }
  // Gate/up rows come in pairs: the even row stores the pair's product.
  if (r < ph.rows && !(ph.kind == kGateUp && (r & 1))) store_rows(ph, r, r + 1, y + r, bufs, 0);
}

__global__ void fill_weights(uint8_t* w, int rows, int cols, uint32_t seed) {
  const int rb = row_bytes(cols), nibbles = cols / 2;
  const size_t total = size_t(rows) * rb;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const int off = int(i % rb);
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    if (off < nibbles)
      w[i] = uint8_t(h);
    else if (((off - nibbles) & 1) == 0)
      *reinterpret_cast<__half*>(w + i) = __float2half(0.004f + 0.002f * float(h % 5));
  }
}
__global__ void read_probe(const int4* p, size_t n, int* sink) {
  int4 a = make_int4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    a.x ^= v.x, a.y ^= v.y, a.z ^= v.z, a.w ^= v.w;
  }
  if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345) *sink = 1;
}

struct Matrix {
  uint8_t* w = nullptr;
  int rows = 0, cols = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int layers = 32, reps = 2, stages = 4, l2_ahead = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stages"))
      stages = std::clamp(std::atoi(argv[i + 1]), 2, kMaxStages);
    if (!std::strcmp(argv[i], "--l2-ahead")) l2_ahead = std::clamp(std::atoi(argv[i + 1]), 0, 16);
    if (!std::strcmp(argv[i], "--layers")) layers = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, %d layers, ring %d x %d KiB, L2 prefetch %d chunks ahead\n",
              prop.name, sms, layers, stages, kRingBytes / stages / 1024, l2_ahead);

  auto make = [](int rows, int cols, uint32_t seed) {
    Matrix m;
    m.rows = rows, m.cols = cols;
    PROBE_CHECK(cudaMalloc(&m.w, size_t(rows) * row_bytes(cols)));
    fill_weights<<<1024, 256>>>(m.w, rows, cols, seed);
    return m;
  };
  std::vector<Matrix> qkv, out, gate_up, down;
  for (int l = 0; l < layers; ++l) {
    qkv.push_back(make(3 * kHidden, kHidden, 11 + l));
    out.push_back(make(kHidden, kHidden, 1000 + l));
    gate_up.push_back(make(2 * kFf, kHidden, 2000 + l));
    down.push_back(make(kHidden, kFf, 3000 + l));
  }
  const Matrix head = make(kVocab, kHidden, 77);
  float* norm_w;
  PROBE_CHECK(cudaMalloc(&norm_w, kHidden * sizeof(float)));
  const std::vector<float> ones(kHidden, 1.f);
  PROBE_CHECK(cudaMemcpy(norm_w, ones.data(), kHidden * 4, cudaMemcpyHostToDevice));
  Buffers bufs;
  PROBE_CHECK(cudaMalloc(&bufs.residual, kHidden * 4));
  PROBE_CHECK(cudaMalloc(&bufs.qkv, 3 * kHidden * 4));
  PROBE_CHECK(cudaMalloc(&bufs.attention, kHidden * 4));
  PROBE_CHECK(cudaMalloc(&bufs.ffn, kFf * 4));
  PROBE_CHECK(cudaMalloc(&bufs.logits, kVocab * 4));
  PROBE_CHECK(cudaMalloc(&bufs.arrivals, 4));
  std::vector<float> residual0(kHidden);
  for (int i = 0; i < kHidden; ++i) residual0[i] = float((i * 7919) % 2001) / 1000.f - 1.f;

  auto build = [&](int n_layers) {
    std::vector<Phase> ph;
    for (int l = 0; l < n_layers; ++l) {
      ph.push_back({qkv[l].w, 3 * kHidden, kHidden, kQkv, kNormedResidual, 1, norm_w});
      ph.push_back({nullptr, 0, 0, kAttention, kNone, 1, nullptr});
      ph.push_back({out[l].w, kHidden, kHidden, kOut, kAttentionOut, 1, nullptr});
      ph.push_back({gate_up[l].w, 2 * kFf, kHidden, kGateUp, kNormedResidual, 2, norm_w});
      ph.push_back({down[l].w, kHidden, kFf, kDown, kFfn, 1, nullptr});
    }
    ph.push_back({head.w, kVocab, kHidden, kHead, kNormedResidual, 1, norm_w});
    return ph;
  };
  const size_t smem =
      size_t(kRingBytes) + kFf + 2 * (kFf / 32) * 4 + kMaxShare * 4 + 32 * 4 + 2 * kMaxStages * 8;
  const Ring ring{stages, (kRingBytes / stages) & ~127, l2_ahead};
  PROBE_CHECK(cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)));
  std::vector<Phase> phases = build(layers);
  for (const Phase& p : phases) {  // every chunk fits a stage, every share the accumulators
    if (p.w && (chunk_rows(p, ring.stage_bytes) < 1 ||
                (p.rows + sms - 1) / sms + p.rows_per_unit > kMaxShare)) {
      std::fprintf(stderr, "a %d x %d phase does not fit %d-byte stages or %d rows a block\n",
                   p.rows, p.cols, ring.stage_bytes, kMaxShare);
      return 1;
    }
  }
  Phase* d_phases;
  PROBE_CHECK(cudaMalloc(&d_phases, sizeof(Phase) * phases.size()));
  auto launch = [&](int n_phases, int variant) {
    PROBE_CHECK(cudaMemsetAsync(bufs.arrivals, 0, 4));
    Ring r = ring;
    void* args[] = {&d_phases, &n_phases, &bufs, &r, &variant};
    PROBE_CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(sms), dim3(kThreads),
                                            args, smem, 0));
  };

  // Check: two layers and the head against the reference.
  {
    const std::vector<Phase> two = build(std::min(2, layers));
    PROBE_CHECK(
        cudaMemcpy(d_phases, two.data(), sizeof(Phase) * two.size(), cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(bufs.residual, residual0.data(), kHidden * 4, cudaMemcpyHostToDevice));
    launch(int(two.size()), 0);
    PROBE_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(kVocab), want(kVocab);
    PROBE_CHECK(cudaMemcpy(got.data(), bufs.logits, kVocab * 4, cudaMemcpyDeviceToHost));
    int8_t* xq;
    float *xd, *y;
    int* xs;
    PROBE_CHECK(cudaMalloc(&xq, kFf));
    PROBE_CHECK(cudaMalloc(&xd, kFf / 32 * 4));
    PROBE_CHECK(cudaMalloc(&xs, kFf / 32 * 4));
    PROBE_CHECK(cudaMalloc(&y, kVocab * 4));
    PROBE_CHECK(cudaMemcpy(bufs.residual, residual0.data(), kHidden * 4, cudaMemcpyHostToDevice));
    const int prep_smem = kFf + 2 * (kFf / 32) * 4 + 32 * 4;
    for (const Phase& p : two) {
      if (p.w) {
        const float* src = p.x_source == kNormedResidual ? bufs.residual
                           : p.x_source == kAttentionOut ? bufs.attention
                                                         : bufs.ffn;
        reference_prepare<<<1, kConsumers, prep_smem>>>(
            src, p.cols, p.x_source == kNormedResidual ? p.norm_w : nullptr, xq, xd, xs);
        reference_gemv<<<(p.rows + 127) / 128, 128>>>(p.w, p.rows, p.cols, xq, xd, xs, y);
      }
      reference_store<<<(std::max(p.rows, kHidden) + 255) / 256, 256>>>(p, y, bufs);
    }
    PROBE_CHECK(cudaMemcpy(want.data(), bufs.logits, kVocab * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int i = 0; i < kVocab; ++i) {
      num += double(got[i] - want[i]) * (got[i] - want[i]);
      den += double(want[i]) * want[i];
    }
    const double rel = std::sqrt(num / den);
    std::printf("check (%d layers + head): logits relative error %.3g (%s)\n", std::min(2, layers),
                rel, rel < 1e-4 ? "ok" : "FAILED");
    PROBE_CHECK(cudaFree(xq));
    PROBE_CHECK(cudaFree(xd));
    PROBE_CHECK(cudaFree(xs));
    PROBE_CHECK(cudaFree(y));
    if (!(rel < 1e-4)) return 1;
  }

  cudaEvent_t t0, t1;
  PROBE_CHECK(cudaEventCreate(&t0));
  PROBE_CHECK(cudaEventCreate(&t1));
  {
    const size_t bytes = size_t(1) << 31;
    int4* p;
    int* sink;
    PROBE_CHECK(cudaMalloc(&p, bytes));
    PROBE_CHECK(cudaMalloc(&sink, 4));
    PROBE_CHECK(cudaMemset(p, 1, bytes));
    float best = 1e9f;
    for (int i = 0; i < 6; ++i) {
      PROBE_CHECK(cudaEventRecord(t0));
      read_probe<<<sms * 8, 512>>>(p, bytes / 16, sink);
      PROBE_CHECK(cudaEventRecord(t1));
      PROBE_CHECK(cudaEventSynchronize(t1));
      float ms;
      PROBE_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      best = std::min(best, ms);
    }
    std::printf("read bandwidth %.0f GB/s\n", bytes / best / 1e6);
    PROBE_CHECK(cudaFree(p));
    PROBE_CHECK(cudaFree(sink));
  }

  PROBE_CHECK(
      cudaMemcpy(d_phases, phases.data(), sizeof(Phase) * phases.size(), cudaMemcpyHostToDevice));
  size_t weight_bytes = 0;
  for (const Phase& p : phases)
    if (p.w) weight_bytes += size_t(p.rows) * row_bytes(p.cols);
  struct Variant {
    const char* name;
    int flags;
  };
  const Variant variants[] = {{"stream", kNoDots | kNoX | kNoWait},
                              {"dots", kNoX | kNoWait},
                              {"dots+x", kNoWait},
                              {"full", 0},
                              {"full-relaxed", kRelaxed}};
  std::printf("%zu MB of weights a token, %zu phases\n", weight_bytes >> 20, phases.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (const Variant& v : variants) {
      PROBE_CHECK(cudaMemcpy(bufs.residual, residual0.data(), kHidden * 4, cudaMemcpyHostToDevice));
      launch(int(phases.size()), v.flags);  // warm-up
      PROBE_CHECK(cudaDeviceSynchronize());
      constexpr int kTokens = 30;
      PROBE_CHECK(cudaEventRecord(t0));
      for (int i = 0; i < kTokens; ++i) launch(int(phases.size()), v.flags);
      PROBE_CHECK(cudaEventRecord(t1));
      PROBE_CHECK(cudaEventSynchronize(t1));
      float ms;
      PROBE_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      std::printf("%-13s %.3f ms/token  %5.0f GB/s\n", v.name, ms / kTokens,
                  weight_bytes / (ms / kTokens) / 1e6);
    }
  }
  return 0;
}
