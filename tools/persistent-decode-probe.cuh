// The device half of hearth-persistent-probe (persistent-decode-probe.cu says what it measures):
// the weight ring, the Q4_0 dots, x preparation, and the two ways the phases meet (a grid
// barrier, or words that carry the epoch of the phase that wrote them).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/bulk-copy.cuh"  // the engine's bulk copies (TMA) and their barriers

namespace {

using hearth::cuda::bulk_copy_to_shared;
using hearth::cuda::bulk_expect_bytes;
using hearth::cuda::smem_addr;

constexpr int kHidden = 4096, kFf = 11008, kVocab = 32000;
constexpr int kConsumerWarps = 16;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kRingBytes = 204800, kMaxStages = 8;  // the ring: 200 KiB of the SM's 227
constexpr int kMaxShare = 512;                      // rows a block may own in one phase

constexpr int kGroups = kHidden / 32, kFfGroups = kFf / 32;
// Words a published group takes: 8 of int8 values, the scale, and (residual groups) the sum of
// the squares the reader's rmsnorm needs.
constexpr int kResidualWords = 10, kAttentionWords = 9;

// kEmbed (dataflow only): the residual's owners load it and publish the first x.
enum Kind { kEmbed, kQkv, kAttention, kOut, kGateUp, kDown, kHead };
enum XSource { kNormedResidual, kAttentionOut, kFfn, kNone };
// Variant switches. kDataflow: no grid barrier; each phase publishes its output in words that
// carry the phase's epoch, and a reader's load of them is also its wait.
// kCounted (with kDataflow): each phase also waits at the grid barrier before reading its words,
// so the words are read once, ready (what the polling of the words itself costs). kBackoff (with
// kDataflow): a word that is not ready yet is polled again only after a short sleep.
enum : int {
  kNoDots = 1,
  kNoWait = 2,
  kNoX = 4,
  kRelaxed = 8,
  kDataflow = 16,
  kCounted = 32,
  kBackoff = 64
};

struct Phase {
  const uint8_t* w;  // nullptr: a phase without weights
  // rows_per_unit: 2 for gate/up rows interleaved (4 in dataflow: a word holds two h values);
  // 32 for the residual's owners in dataflow (a block publishes whole groups)
  int rows, cols, kind, x_source, rows_per_unit;
  const float* norm_w;       // the rmsnorm weight of this phase's x
  const float* next_norm_w;  // dataflow: the norm of the x this phase's residual feeds
  // > 0: w holds K/V cache rows of this many bytes (dataflow's attention at a depth), streamed
  // through the ring like weights; the attention math on them is not done
  int kv_row_bytes;
  // dataflow: the half of ffn_words the gate/up phase writes and the down phase reads (the
  // layer's parity). With one buffer a block that owns no residual group (nothing later waits
  // for it until the next layer's gate/up) could still be reading h when the next layer's h
  // overwrites it.
  int ffn_half;
};

// The ring's shape and how far ahead the producer asks L2 for chunks (0: no L2 prefetch).
struct Ring {
  int stages, stage_bytes, l2_ahead;
};

struct Buffers {
  float *residual, *qkv, *attention, *ffn, *logits;
  unsigned* arrivals;  // the grid barrier's counter
  // dataflow words (payload low, epoch high): q/k/v rows; the residual's x for attention and
  // for the FFN (groups of kResidualWords); the attention's x; h as fp16 pairs, two halves of
  // kFf / 2 words (Phase::ffn_half)
  uint64_t *qkv_words, *residual_words[2], *attention_words, *ffn_words;
};

__host__ __device__ int row_bytes(int cols) {
  return cols / 2 + cols / 32 * 2;
}
// Warps that share a row, so a lane holds at most 4 blocks of x.
__host__ __device__ int warps_per_row(int cols) {
  const int blocks = cols / 32;
  return blocks <= 128 ? 1 : blocks <= 256 ? 2 : blocks <= 512 ? 4 : 8;
}
__host__ __device__ int phase_row_bytes(const Phase& p) {
  return p.kv_row_bytes > 0 ? p.kv_row_bytes : row_bytes(p.cols);
}
// Rows a stage holds: a multiple of the rows the consumer warps take at once.
// (At least one row: a stage smaller than the rows taken at once leaves warps idle.)
__host__ __device__ int chunk_rows(const Phase& p, int stage_bytes) {
  if (p.kv_row_bytes > 0) return stage_bytes / p.kv_row_bytes;
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
// Dataflow: the residual's rows block b owns (whole groups of 32; the same for every phase).
__host__ __device__ void owned_rows(int b, int nb, int& r0, int& r1) {
  Phase groups{};
  groups.rows = kHidden, groups.rows_per_unit = 32;
  block_share(groups, b, nb, r0, r1);
}

__device__ __forceinline__ void barrier_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// A wait that never ends is a bug here (a chunk or a word nobody sends): stop the kernel with an
// error after 4M spins (a legitimate wait is at most a token, ~2 ms) instead of hanging the call.
constexpr uint32_t kSpinLimit = 1u << 22;
__device__ __forceinline__ void count_spin(uint32_t& spins) {
  if (++spins > kSpinLimit) asm volatile("trap;");
}

__device__ __forceinline__ void wait_parity(uint64_t* b, uint32_t parity) {
  uint32_t done = 0, spins = 0;
  while (!done) {
    count_spin(spins);
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
  }
}
// The consumer warps only (named barrier 1).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// N values (N % 4 == 0) scaled by inv and rounded to int8, four to a word; returns their sum
// (for Q4_0's -8 offset). Every form that quantizes x rounds through here or as publish_group
// does, lane by lane, with the same __float2int_rn(v * inv).
template <int N>
__device__ __forceinline__ int pack_int8(const float (&v)[N], float inv,
                                         uint32_t (&packed)[N / 4]) {
  int sum = 0;
#pragma unroll
  for (int k = 0; k < N / 4; ++k) packed[k] = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int q = __float2int_rn(v[i] * inv);
    sum += q;
    packed[i / 4] |= uint32_t(q & 0xff) << (8 * (i % 4));
  }
  return sum;
}

// n values of src (n % 256 == 0), rms-normalised with w when w is given, to int8 groups of 32:
// xq, xd (the group's scale), xs (the sum of its int8 values, for Q4_0's -8 offset). Run by the
// kConsumers threads (index ct); uses red[kConsumerWarps]. The int8 values come from src * w
// and the rms scale goes into xd only, as a dataflow reader does (quantization is scale-free).
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
      if (w) v[i] *= w[e + i];
      amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, 2));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    uint32_t packed[2];
    int sum = pack_int8(v, inv, packed);
    *reinterpret_cast<uint2*>(xq + e) = make_uint2(packed[0], packed[1]);
    sum += __shfl_xor_sync(~0u, sum, 1);
    sum += __shfl_xor_sync(~0u, sum, 2);
    if ((lane & 3) == 0) xd[e / 32] = amax / 127.f * scale, xs[e / 32] = sum;
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
        // h through fp16, as the dataflow words carry it
        if ((i & 1) == 0) bufs.ffn[row / 2] = __half2float(__float2half(silu(acc[i]) * acc[i + 1]));
        break;
    }
  }
}

// ---- dataflow: words that carry the epoch of the phase that wrote them ----
// epoch = token * 1024 + phase index. A word is (epoch << 32) | payload, stored and loaded whole
// (8-byte relaxed accesses at GPU scope are single-copy atomic), so a reader that sees the epoch
// it expects sees the payload written with it: no barrier, no release fence.
__device__ __forceinline__ void publish(uint64_t* at, uint32_t payload, uint32_t epoch) {
  const uint64_t word = (uint64_t(epoch) << 32) | payload;
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(at), "l"(word) : "memory");
}
__device__ __forceinline__ uint64_t peek(const uint64_t* at) {
  uint64_t word;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(word) : "l"(at) : "memory");
  return word;
}
__device__ int g_backoff_ns;  // kBackoff: set by the host before each launch (0: spin)
// The payloads of at[0..N) once each word carries `epoch` (every load issued before any wait).
template <int N>
__device__ void await_words(const uint64_t* at, uint32_t epoch, uint32_t (&out)[N]) {
  uint64_t word[N];
#pragma unroll
  for (int k = 0; k < N; ++k) word[k] = peek(at + k);
  uint32_t spins = 0;
  for (bool all = false; !all;) {
    all = true;
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (uint32_t(word[k] >> 32) != epoch) all = false, word[k] = peek(at + k);
    if (!all) {
      count_spin(spins);
      if (g_backoff_ns) __nanosleep(g_backoff_ns);
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = uint32_t(word[k]);
}

// A warp's 32 values (lane i holds v) as a published group: 8 words of int8, the scale, and
// with `with_ss` a tenth word, the sum over the lanes of `square` (the reader's rmsnorm).
// The int8 values round as prepare_x rounds them.
__device__ void publish_group(float v, int lane, uint64_t* words, uint32_t epoch, float square,
                              bool with_ss) {
  float amax = fabsf(v);
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  const int q = __float2int_rn(v * inv);
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    packed |= uint32_t(__shfl_sync(~0u, q, 4 * (lane & 7) + i) & 0xff) << (8 * i);
  if (lane < 8) publish(words + lane, packed, epoch);
  if (lane == 8) publish(words + 8, __float_as_uint(amax / 127.f), epoch);
  if (with_ss) {
    for (int o = 16; o; o >>= 1) square += __shfl_xor_sync(~0u, square, o);
    if (lane == 9) publish(words + 9, __float_as_uint(square), epoch);
  }
}

// x from kGroups published groups of kWords: xq, xs, xd; with sums of squares (kWords 10) xd is
// scaled by the rms over the hidden size. All consumer threads call it (it syncs them).
template <int kWords>
__device__ void read_groups(const uint64_t* words, uint32_t epoch, int8_t* xq, float* xd, int* xs,
                            float* red, int ct) {
  float ss = 0.f;
  if (ct < kGroups) {
    uint32_t w[kWords];
    await_words<kWords>(words + ct * kWords, epoch, w);
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      reinterpret_cast<uint32_t*>(xq + ct * 32)[k] = w[k];
#pragma unroll
      for (int i = 0; i < 4; ++i) sum += int8_t(w[k] >> (8 * i));
    }
    xs[ct] = sum;
    xd[ct] = __uint_as_float(w[8]);
    if constexpr (kWords > 9) ss = __uint_as_float(w[9]);
  }
  if constexpr (kWords > 9) {
    const int lane = ct & 31, warp = ct >> 5;
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if (lane == 0) red[warp] = ss;
    consumers_sync();
    float total = 0.f;
    for (int i = 0; i < kConsumerWarps; ++i) total += red[i];
    if (ct < kGroups) xd[ct] *= rsqrtf(total / kHidden + 1e-5f);
  }
}

// x from h published as fp16 pairs, each group of 32 quantized here (as prepare_x does).
__device__ void read_ffn(const uint64_t* words, uint32_t epoch, int8_t* xq, float* xd, int* xs,
                         int ct) {
  for (int g = ct; g < kFfGroups; g += kConsumers) {
    uint32_t w[16];
    await_words<16>(words + g * 16, epoch, w);
    float v[32], amax = 0.f;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[k]);
      v[2 * k] = __low2float(h), v[2 * k + 1] = __high2float(h);
      amax = fmaxf(amax, fmaxf(fabsf(v[2 * k]), fabsf(v[2 * k + 1])));
    }
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    uint32_t packed[8];
    const int sum = pack_int8(v, inv, packed);
#pragma unroll
    for (int k = 0; k < 8; ++k) reinterpret_cast<uint32_t*>(xq + g * 32)[k] = packed[k];
    xd[g] = amax / 127.f;
    xs[g] = sum;
  }
}

// A weight phase's rows, published. The residual stays with the blocks that own its groups
// (`resid`, the block's rows of it, kept across phases): the O and down projections add into it
// and publish the next x.
__device__ void publish_rows(const Phase& ph, int r0, int r1, const float* acc, float* resid,
                             Buffers bufs, uint32_t epoch, int ct) {
  const int lane = ct & 31, warp = ct >> 5;
  switch (ph.kind) {
    case kQkv:
      for (int i = ct; i < r1 - r0; i += kConsumers)
        publish(bufs.qkv_words + r0 + i, __float_as_uint(acc[i]), epoch);
      break;
    case kOut:  // (these phases' rows are the block's owned rows)
    case kDown:
      for (int g = warp; g < (r1 - r0) / 32; g += kConsumerWarps) {
        const int i = g * 32 + lane;
        resid[i] += acc[i];
        publish_group(resid[i] * ph.next_norm_w[r0 + i], lane,
                      bufs.residual_words[ph.kind == kOut] + (r0 / 32 + g) * kResidualWords, epoch,
                      resid[i] * resid[i], true);
      }
      break;
    case kGateUp:  // rows g0 u0 g1 u1 -> one word of h0, h1
      for (int i = 4 * ct; i < r1 - r0; i += 4 * kConsumers) {
        const __half2 h =
            __floats2half2_rn(silu(acc[i]) * acc[i + 1], silu(acc[i + 2]) * acc[i + 3]);
        publish(bufs.ffn_words + ph.ffn_half * (kFf / 2) + (r0 + i) / 4,
                *reinterpret_cast<const uint32_t*>(&h), epoch);
      }
      break;
    case kHead:
      for (int i = ct; i < r1 - r0; i += kConsumers) bufs.logits[r0 + i] = acc[i];
      break;
  }
}

// The phases without weights, in dataflow: the residual's owners load it and publish the first
// x (kEmbed); the attention stand-in quantizes its groups of q (kAttention).
__device__ void publish_unweighted(const Phase& ph, int r0, int r1, float* resid, Buffers bufs,
                                   uint32_t epoch_in, uint32_t epoch, int ct) {
  const int lane = ct & 31, warp = ct >> 5;
  for (int g = warp; g < (r1 - r0) / 32; g += kConsumerWarps) {
    const int i = g * 32 + lane;
    if (ph.kind == kEmbed) {
      resid[i] = __ldcg(bufs.residual + r0 + i);
      publish_group(resid[i] * ph.next_norm_w[r0 + i], lane,
                    bufs.residual_words[0] + (r0 / 32 + g) * kResidualWords, epoch,
                    resid[i] * resid[i], true);
    } else {
      uint32_t q[1];
      await_words<1>(bufs.qkv_words + r0 + i, epoch_in, q);
      publish_group(__uint_as_float(q[0]), lane,
                    bufs.attention_words + (r0 / 32 + g) * kAttentionWords, epoch, 0.f, false);
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
    const int rb = phase_row_bytes(ph), n = min(chunk_rows(ph, stage_bytes), r1 - r);
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
    persistent_kernel(const Phase* phases, int n_phases, Buffers bufs, Ring ring, int variant,
                      uint32_t token) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* stages = smem;
  int8_t* xq = reinterpret_cast<int8_t*>(smem + kRingBytes);
  float* xd = reinterpret_cast<float*>(xq + kFf);
  int* xs = reinterpret_cast<int*>(xd + kFf / 32);
  float* acc = reinterpret_cast<float*>(xs + kFf / 32);
  float* red = acc + kMaxShare;
  float* resid = red + 32;  // dataflow: the block's rows of the residual
  uint64_t* full = reinterpret_cast<uint64_t*>(resid + kMaxShare);
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
      bulk_expect_bytes(&full[s], bytes);
      bulk_copy_to_shared(stages + s * ring.stage_bytes, at, bytes, &full[s]);
      if (++s == ring.stages) s = 0, parity ^= 1;
    }
    return;
  }
  const int ct = threadIdx.x - 32, cw = warp - 1;
  const bool dataflow = variant & kDataflow;
  const bool barrier = !dataflow || (variant & kCounted);
  int s = 0;
  uint32_t parity = 0;
  for (int p = 0; p < n_phases; ++p) {
    const Phase ph = phases[p];
    const uint32_t epoch_in = token * 1024u + uint32_t(p - 1), epoch = token * 1024u + uint32_t(p);
    if (p > 0 && barrier) {
      if (ct == 0 && !(variant & kNoWait)) {
        unsigned seen;
        uint32_t spins = 0;
        do {
          count_spin(spins);
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                       : "=r"(seen)
                       : "l"(bufs.arrivals)
                       : "memory");
        } while (seen < unsigned(nb * p));
      }
      consumers_sync();
    }
    int r0 = 0, r1 = 0;
    if (ph.w && !ph.kv_row_bytes) {
      block_share(ph, b, nb, r0, r1);
      if (dataflow) {
        if (ph.x_source == kNormedResidual)
          read_groups<kResidualWords>(bufs.residual_words[ph.kind == kGateUp], epoch_in, xq, xd, xs,
                                      red, ct);
        else if (ph.x_source == kAttentionOut)
          read_groups<kAttentionWords>(bufs.attention_words, epoch_in, xq, xd, xs, red, ct);
        else
          read_ffn(bufs.ffn_words + ph.ffn_half * (kFf / 2), epoch_in, xq, xd, xs, ct);
      } else if (!(variant & kNoX)) {
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
      if (dataflow)
        publish_rows(ph, r0, r1, acc, resid, bufs, epoch, ct);
      else
        store_rows(ph, r0, r1, acc, bufs, ct);
    } else if (dataflow) {
      if (ph.w) {  // the block's K/V rows pass through the ring (no attention math on them)
        block_share(ph, b, nb, r0, r1);
        for (int r = r0; r < r1; r += chunk_rows(ph, ring.stage_bytes)) {
          wait_parity(&full[s], parity);
          __syncwarp();
          if (lane == 0) arrive(&empty[s]);
          if (++s == ring.stages) s = 0, parity ^= 1;
        }
      }
      owned_rows(b, nb, r0, r1);
      publish_unweighted(ph, r0, r1, resid, bufs, epoch_in, epoch, ct);
    } else if (ph.kind == kAttention) {
      // The stand-in: the block's share of the query passed through.
      const int e0 = int(int64_t(kHidden) * b / nb), e1 = int(int64_t(kHidden) * (b + 1) / nb);
      for (int e = e0 + ct; e < e1; e += kConsumers) bufs.attention[e] = __ldcg(bufs.qkv + e);
    }
    consumers_sync();
    if (ct == 0 && barrier) {
      if (variant & kRelaxed) {
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(bufs.arrivals) : "memory");
      } else {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bufs.arrivals) : "memory");
      }
    }
  }
}

}  // namespace
