// hearth-persistent-probe: how fast one decode token's weight stream could go as ONE persistent
// kernel instead of a graph of launches. A design probe for the "persistent layer kernel" that
// docs/performance-cuda.md (Known gaps) names as the lever left for single-stream decode; it is
// not used by the engine. The figures it gave, and what they mean: docs/history/cuda.md,
// 2026-12-06 (sessions 57 and 58: every form of a phase boundary cost 4 us or more, so the route
// is closed; the probe stays to re-measure it on another GPU).
//
// The model is llama2-7b's weight stream in Q4_0 (32 layers of Q/K/V, O, gate/up and down, then
// the LM head), random weights, stored row-contiguous (each row: cols/2 bytes of nibbles, then
// cols/32 fp16 scales). One block per SM; warp 0 streams the block's rows of every phase through
// a ring of shared-memory stages with bulk copies (TMA), running ahead across phase boundaries
// (the weights depend on nothing); 16 consumer warps dot the rows with x quantized to int8 groups
// of 32, each lane holding its columns of x in registers. Attention is a stand-in phase (q
// passed through) so that a layer has the boundaries a real one needs. The phases meet in one of
// two ways (persistent-decode-probe.cuh):
//   barriers: the grid meets at a counter, then every block prepares the next x itself (rmsnorm
//     + int8 quantization of the residual read from L2);
//   dataflow: no barrier. Each phase publishes its output in 8-byte words that carry the
//     phase's epoch, already quantized where it can (the residual's owners publish int8 groups
//     with their sums of squares; h goes as fp16 pairs), and a reader's load of those words is
//     its wait.
//
// Usage: hearth-persistent-probe [--layers N] [--reps R] [--stages S] [--l2-ahead D] [--depth P]
// Prints a check of both forms against a one-kernel-per-step reference (same arithmetic), the
// read bandwidth, then ms/token for each variant, alternating R rounds: "stream" (no dots, no
// x, no waits: the ceiling), "dots" (+ the dot products), "dots+x" (+ each block's x
// preparation), "full" (+ the grid barriers), "full-relaxed" (barrier arrivals without release
// order: NOT a correct barrier, it only measures what the release costs), "dataflow" and
// "dataflow-nodots" (its boundaries alone), "dataflow-counted" (+ a grid barrier before each
// phase's reads: the words read once, ready) and "dataflow-backoff" (a sleep between polls). With
// --depth P the dataflow rows also stream P positions of f16 K and V a layer through the ring (the
// bytes of attention at that depth, without its math), for comparison with `hearth bench -d P`.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "persistent-decode-probe.cuh"

namespace {

#define PROBE_CHECK(x)                                                                \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

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
  int layers = 32, reps = 2, stages = 4, l2_ahead = 0, depth = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stages"))
      stages = std::clamp(std::atoi(argv[i + 1]), 2, kMaxStages);
    if (!std::strcmp(argv[i], "--l2-ahead")) l2_ahead = std::clamp(std::atoi(argv[i + 1]), 0, 16);
    if (!std::strcmp(argv[i], "--layers")) layers = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--depth")) depth = std::clamp(std::atoi(argv[i + 1]), 0, 32768);
  }
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device %s, %d SMs, %d layers, ring %d x %d KiB, L2 prefetch %d chunks ahead, depth %d\n",
      prop.name, sms, layers, stages, kRingBytes / stages / 1024, l2_ahead, depth);

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
  // The dataflow words start at epoch 0; a launch's epochs start at 1024.
  PROBE_CHECK(cudaMalloc(&bufs.qkv_words, 3 * kHidden * 8));
  PROBE_CHECK(cudaMalloc(&bufs.attention_words, kGroups * kAttentionWords * 8));
  PROBE_CHECK(cudaMalloc(&bufs.ffn_words, 2 * (kFf / 2) * 8));
  PROBE_CHECK(cudaMemset(bufs.qkv_words, 0, 3 * kHidden * 8));
  PROBE_CHECK(cudaMemset(bufs.attention_words, 0, kGroups * kAttentionWords * 8));
  PROBE_CHECK(cudaMemset(bufs.ffn_words, 0, 2 * (kFf / 2) * 8));
  for (uint64_t*& words : bufs.residual_words) {
    PROBE_CHECK(cudaMalloc(&words, kGroups * kResidualWords * 8));
    PROBE_CHECK(cudaMemset(words, 0, kGroups * kResidualWords * 8));
  }
  std::vector<float> residual0(kHidden);
  for (int i = 0; i < kHidden; ++i) residual0[i] = float((i * 7919) % 2001) / 1000.f - 1.f;

  // Dataflow: the residual's owners take whole groups of 32 rows (the embedding, attention
  // stand-in, O and down phases share that split), and a gate/up unit is the 4 rows of a word.
  // --depth D (dataflow only): each layer's attention phase streams D positions of f16 K and V
  // (llama2-7b: 32 heads of 128) through the ring, as a real one would read them.
  constexpr int kKvRowBytes = 128 * 2;
  std::vector<uint8_t*> kv(layers, nullptr);
  const size_t kv_rows = size_t(2) * 32 * depth;
  for (uint8_t*& layer_kv : kv)
    if (depth > 0) {
      PROBE_CHECK(cudaMalloc(&layer_kv, kv_rows * kKvRowBytes));
      PROBE_CHECK(cudaMemset(layer_kv, 0, kv_rows * kKvRowBytes));
    }
  auto build = [&](int n_layers, bool dataflow) {
    const int owned = dataflow ? 32 : 1, pairs = dataflow ? 4 : 2;
    std::vector<Phase> ph;
    auto add = [&](const uint8_t* w, int rows, int cols, int kind, int x_source, int unit,
                   const float* norm, const float* next_norm, int kv_row_bytes = 0,
                   int ffn_half = 0) {
      ph.push_back({w, rows, cols, kind, x_source, unit, norm, next_norm, kv_row_bytes, ffn_half});
    };
    if (dataflow) add(nullptr, kHidden, 0, kEmbed, kNone, owned, nullptr, norm_w);
    for (int l = 0; l < n_layers; ++l) {
      add(qkv[l].w, 3 * kHidden, kHidden, kQkv, kNormedResidual, 1, norm_w, nullptr);
      if (dataflow && depth > 0)
        add(kv[l], int(kv_rows), 0, kAttention, kNone, 1, nullptr, nullptr, kKvRowBytes);
      else
        add(nullptr, 0, 0, kAttention, kNone, 1, nullptr, nullptr);
      add(out[l].w, kHidden, kHidden, kOut, kAttentionOut, owned, nullptr, norm_w);
      add(gate_up[l].w, 2 * kFf, kHidden, kGateUp, kNormedResidual, pairs, norm_w, nullptr, 0,
          l & 1);
      add(down[l].w, kHidden, kFf, kDown, kFfn, owned, nullptr, norm_w, 0, l & 1);
    }
    add(head.w, kVocab, kHidden, kHead, kNormedResidual, 1, norm_w, nullptr);
    return ph;
  };
  const size_t smem = size_t(kRingBytes) + kFf + 2 * (kFf / 32) * 4 + 2 * kMaxShare * 4 + 32 * 4 +
                      2 * kMaxStages * 8;
  const Ring ring{stages, (kRingBytes / stages) & ~127, l2_ahead};
  PROBE_CHECK(cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)));
  const std::vector<Phase> phases = build(layers, false), flow = build(layers, true);
  if (flow.size() > 1024) {  // the epochs count phases in 10 bits
    std::fprintf(stderr, "too many layers\n");
    return 1;
  }
  for (const Phase& p : flow) {  // every chunk fits a stage, every share the accumulators
    if (p.w && (chunk_rows(p, ring.stage_bytes) < 1 ||
                (!p.kv_row_bytes && (p.rows + sms - 1) / sms + p.rows_per_unit > kMaxShare))) {
      std::fprintf(stderr, "a %d x %d phase does not fit %d-byte stages or %d rows a block\n",
                   p.rows, p.cols, ring.stage_bytes, kMaxShare);
      return 1;
    }
  }
  Phase *d_phases, *d_flow;
  PROBE_CHECK(cudaMalloc(&d_phases, sizeof(Phase) * phases.size()));
  PROBE_CHECK(cudaMalloc(&d_flow, sizeof(Phase) * flow.size()));
  uint32_t token = 0;
  auto upload = [](Phase* d, const std::vector<Phase>& list) {
    PROBE_CHECK(cudaMemcpy(d, list.data(), sizeof(Phase) * list.size(), cudaMemcpyHostToDevice));
  };
  auto launch = [&](Phase* d, int n_phases, int variant) {
    PROBE_CHECK(cudaMemsetAsync(bufs.arrivals, 0, 4));
    const int backoff_ns = variant & kBackoff ? 64 : 0;
    PROBE_CHECK(cudaMemcpyToSymbolAsync(g_backoff_ns, &backoff_ns, sizeof backoff_ns));
    Ring r = ring;
    uint32_t t = ++token;
    void* args[] = {&d, &n_phases, &bufs, &r, &variant, &t};
    PROBE_CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(sms), dim3(kThreads),
                                            args, smem, 0));
  };

  // Check: two layers and the head, the barrier form and the dataflow form, against the
  // reference.
  {
    const int n = std::min(2, layers);
    const std::vector<Phase> two = build(n, false), two_flow = build(n, true);
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
    std::vector<float> got(kVocab), want(kVocab);
    PROBE_CHECK(cudaMemcpy(want.data(), bufs.logits, kVocab * 4, cudaMemcpyDeviceToHost));
    for (const bool dataflow : {false, true}) {
      const std::vector<Phase>& list = dataflow ? two_flow : two;
      Phase* d = dataflow ? d_flow : d_phases;  // each holds its form's whole phase list
      upload(d, list);
      PROBE_CHECK(cudaMemcpy(bufs.residual, residual0.data(), kHidden * 4, cudaMemcpyHostToDevice));
      PROBE_CHECK(cudaMemset(bufs.logits, 0, kVocab * 4));
      launch(d, int(list.size()), dataflow ? kDataflow : 0);
      PROBE_CHECK(cudaDeviceSynchronize());
      PROBE_CHECK(cudaMemcpy(got.data(), bufs.logits, kVocab * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (int i = 0; i < kVocab; ++i) {
        num += double(got[i] - want[i]) * (got[i] - want[i]);
        den += double(want[i]) * want[i];
      }
      const double rel = std::sqrt(num / den);
      // The kernel and the reference sum in different orders, so now and then an fp16 h or an
      // int8 x rounds the other way: up to 1e-3 is that, past it the kernel is wrong.
      std::printf("check (%d layers + head, %s): logits relative error %.3g (%s)\n", n,
                  dataflow ? "dataflow" : "barriers", rel,
                  rel < 1e-4   ? "ok"
                  : rel < 1e-3 ? "ok, a rounding flip"
                               : "FAILED");
      if (!(rel < 1e-3)) return 1;
    }
    PROBE_CHECK(cudaFree(xq));
    PROBE_CHECK(cudaFree(xd));
    PROBE_CHECK(cudaFree(xs));
    PROBE_CHECK(cudaFree(y));
  }

  cudaEvent_t t0, t1;
  double read_gbps = 0;
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
    read_gbps = bytes / best / 1e6;
    std::printf("read bandwidth %.0f GB/s\n", read_gbps);
    PROBE_CHECK(cudaFree(p));
    PROBE_CHECK(cudaFree(sink));
  }

  upload(d_phases, phases);
  upload(d_flow, flow);
  auto streamed_bytes = [](const std::vector<Phase>& list) {
    size_t bytes = 0;
    for (const Phase& p : list)
      if (p.w) bytes += size_t(p.rows) * phase_row_bytes(p);
    return bytes;
  };
  const size_t weight_bytes = streamed_bytes(phases), flow_bytes = streamed_bytes(flow);
  struct Variant {
    const char* name;
    int flags;
  };
  const Variant variants[] = {{"stream", kNoDots | kNoX | kNoWait},
                              {"dots", kNoX | kNoWait},
                              {"dots+x", kNoWait},
                              {"full", 0},
                              {"full-relaxed", kRelaxed},
                              {"dataflow", kDataflow},
                              {"dataflow-nodots", kDataflow | kNoDots},
                              {"dataflow-counted", kDataflow | kCounted},
                              {"dataflow-backoff", kDataflow | kBackoff}};
  std::printf("%zu MB of weights a token, %zu phases; dataflow: %zu MB with the K/V at depth %d\n",
              weight_bytes >> 20, phases.size(), flow_bytes >> 20, depth);
  for (int rep = 0; rep < reps; ++rep) {
    for (const Variant& v : variants) {
      PROBE_CHECK(cudaMemcpy(bufs.residual, residual0.data(), kHidden * 4, cudaMemcpyHostToDevice));
      Phase* d = v.flags & kDataflow ? d_flow : d_phases;
      const int n_phases = int(v.flags & kDataflow ? flow.size() : phases.size());
      launch(d, n_phases, v.flags);  // warm-up
      PROBE_CHECK(cudaDeviceSynchronize());
      constexpr int kTokens = 30;
      PROBE_CHECK(cudaEventRecord(t0));
      for (int i = 0; i < kTokens; ++i) launch(d, n_phases, v.flags);
      PROBE_CHECK(cudaEventRecord(t1));
      PROBE_CHECK(cudaEventSynchronize(t1));
      float ms;
      PROBE_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      const double gbps = (v.flags & kDataflow ? flow_bytes : weight_bytes) / (ms / kTokens) / 1e6;
      std::printf("%-15s %.3f ms/token  %5.0f GB/s  %3.0f%% of the read bandwidth\n", v.name,
                  ms / kTokens, gbps, 100 * gbps / read_gbps);
    }
  }
  return 0;
}
