// The sampled pick on CUDA: the sampler chain of sampling/sampler.h (penalties -> top-k -> top-p
// -> min-p -> temperature -> seeded draw) over one row of logits, so a chained decode keeps
// drawing on the device. Nothing is sorted: top-k and top-p find their cut by a radix select over
// order-preserving 32-bit keys of the logits (11-, 11- and 10-bit passes), counting tokens for
// top-k and adding up probability mass for top-p. Masses are 2^-40 fixed point in 64-bit
// integers, so every sum is exact and independent of the order threads add in. The draw is a
// Gumbel-max over the kept set (each id's variate from the seed, the position and the id), so
// the same seed draws the same tokens on every run; the distribution is the host sampler's, the
// tokens are not the host's (its draw walks one uniform through the weights).
// One thread-block cluster of 8 or 16 blocks runs a row (one block was bound by one SM's
// instruction rate: ~0.16 ms a token at 32k ids, ~0.6 ms at 128k); the blocks combine their
// partial maxima, sums and histograms through distributed shared memory at cluster barriers
// (sample-select.cuh). A served step's rows are one launch, a cluster a row.
#include <cooperative_groups.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/argmax-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/sample-select.cuh"

namespace hearth::cuda {

namespace {

using namespace sample;

// Blocks in the cluster: the portable 8, or 16 (non-portable, where the device allows it) for
// large vocabularies, whose passes cost more than the cluster's barriers.
constexpr int kPortableCluster = 8, kLargeCluster = kMaxCluster;
constexpr int64_t kLargeClusterFrom = 65536;   // ids
constexpr float kFixedOne = 1099511627776.0f;  // 2^40: a weight of 1 in fixed point

__device__ __forceinline__ float clean(float v) {
  return isnan(v) ? -INFINITY : v;
}

// w in [0, 1]; scaling by 2^40 is exact in float, so this truncates the same value a double
// product would, without the double conversions.
__device__ __forceinline__ uint64_t fixed_weight(float w) {
  return __float2ull_rz(w * kFixedOne);
}

// splitmix64: the draw's variates from (seed, position, id), the same on every run.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A Gumbel variate -log(E), E = -log(u) an exponential one, from 53 random bits (u = (k + 0.5) /
// 2^53), in float: E is taken as log1p(-(1 - u)) above u = 1/2, where 1 - u is exact and log(u)
// would lose it (the largest variates, which decide most draws, come from there).
__device__ __forceinline__ float gumbel(uint64_t bits) {
  const uint64_t k = bits >> 11;
  constexpr float kUlp = 1.0f / 9007199254740992.0f;  // 2^-53
  const float e = k >= (uint64_t(1) << 52)
                      ? -log1pf(-((float((uint64_t(1) << 53) - k) - 0.5f) * kUlp))
                      : -__logf((float(k) + 0.5f) * kUlp);
  return -__logf(e);
}

// The chain's draw from one row (every thread of the cluster returns the same id).
template <class Value>
__device__ int draw_from_row(Value value, int n, const SamplePickParams& p, int32_t next_pos,
                             Cluster& c) {
  float m = -INFINITY;
  for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all) m = fmaxf(m, value(i));
  m = c.max(m);
  // Greedy (or nothing to weigh): the first index of the max.
  if (p.temperature <= 0.0f || !isfinite(m)) {
    const int first = first_index_of(value, n, m, c);
    return first == INT_MAX ? 0 : first;
  }
  Stages st;
  if (p.top_k > 0 && p.top_k < n)
    st.top_k = find_cut(
        value, n, st, uint64_t(p.top_k), [](float) { return uint64_t(1); }, c);
  // min-p's cut is a threshold on the logit: the max alone fixes it.
  if (p.min_p > 0.0f) {
    const float threshold = m + logf(p.min_p);
    st.min_p.keep_all = false;
    if (threshold > m) {  // only the best: the max at its first index
      st.min_p.key = order_key(m);
      st.min_p.id = first_index_of(value, n, m, c);
    } else {
      st.min_p.key = order_key(threshold);
      st.min_p.id = INT_MAX;
    }
  }
  const bool top_p = p.top_p < 1.0f;
  const auto mass = [m](float l) { return fixed_weight(__expf(l - m)); };
  // The draw (Gumbel-max): the kept token with the largest (l - m) / T + g_i, g_i a Gumbel
  // variate from (seed, position, id), is a draw from the kept set's softmax at temperature T.
  // With top-p on, the same pass adds up the top-k set's mass and the part min-p keeps.
  const float inv_t = 1.0f / p.temperature;
  const uint64_t stream = mix(p.seed ^ mix(uint64_t(next_pos) - 1));
  // d.a: the best packed (score, id); d.b: the top-k set's mass; d.c: the part kept.
  const auto draw = [&](const Stages& kept, bool sums) {
    Triple d;
    for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all) {
      const float l = value(i);
      const uint32_t k = order_key(l);
      if (!kept.top_k.keeps(k, i)) continue;
      const uint64_t w = sums ? mass(l) : 0;
      d.b += w;
      if (!kept.top_p.keeps(k, i) || !kept.min_p.keeps(k, i)) continue;
      d.c += w;
      const float score = (l - m) * inv_t + gumbel(mix(stream + uint64_t(i)));
      // Ties go to the lower id, as everywhere else in the chain.
      d.a = ::max(d.a, (uint64_t(order_key(score)) << 32) | uint32_t(INT_MAX - i));
    }
    return c.reduce(d);
  };
  // top-p keeps the shortest prefix of the top-k set (logit descending, id ascending) whose
  // mass reaches need; min-p's set is a prefix of the same order. When min-p's part holds less
  // than need, top-p's prefix is the longer one and cuts nothing min-p keeps: the draw above
  // stands (the common case: min-p is the tighter cut). Otherwise find top-p's cut and draw again.
  Triple d = draw(st, top_p);
  if (top_p) {
    const uint64_t need = ::max(uint64_t(1), uint64_t(double(p.top_p) * double(d.b)));
    if (d.c >= need) {
      Stages by_k;
      by_k.top_k = st.top_k;
      st.top_p = find_cut(value, n, by_k, 0, mass, c, p.top_p);
      d = draw(st, false);
    }
  }
  if (d.a != 0) return INT_MAX - int(uint32_t(d.a));
  // Nothing kept had a finite score: the best token (the same condition in every thread).
  return first_index_of(value, n, m, c);
}

// One row per cluster: `rows` (device) gives each cluster its row, rule and position, and the id
// goes to ids[row]; without rows, one cluster draws from `logits` by `p` with the penalties over
// the history ring and writes the chained decode's token, position, history and host copy.
__global__ void __launch_bounds__(kThreads)
    sample_pick_kernel(const float* __restrict__ logits, float* __restrict__ work, int n,
                       SamplePickParams p, int32_t* history, int32_t* history_len, int history_cap,
                       int32_t* token, int32_t* pos, int32_t next_pos, int32_t* host_token,
                       const SampleRowPick* __restrict__ rows, int32_t* __restrict__ ids) {
  __shared__ Shared sh;
  // The penalties' window (rank 0, before any stage) and find_cut's partials share memory.
  __shared__ union {
    int32_t window[kSampleHistoryMax];
    uint64_t partials[kThreads];
  } scratch;
  int32_t* const window = scratch.window;
  Cluster c{cg::this_cluster(), sh, scratch.partials, 0, 0, 0};
  c.rank = int(c.group.block_rank());
  c.size = int(c.group.num_blocks());
  c.all = c.size * kThreads;
  int row = 0;
  if (rows) {
    const SampleRowPick& r = rows[blockIdx.x / unsigned(c.size)];
    row = r.row;
    p = r.p;
    p.penalize = false;  // rows have no history (the launcher refuses such rules)
    next_pos = r.next_pos;
    logits += int64_t(row) * n;
  }
  // Penalties over the window (the last repeat_last_n tokens of the history) go into a copy of
  // the logits; without them every stage reads the logits themselves.
  const bool rep = p.repeat_penalty != 1.0f;
  const int len = rows ? 0 : *history_len;
  const int w = p.penalize ? min(min(len, p.repeat_last_n), history_cap) : 0;
  if (p.penalize) {
    for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all)
      work[i] = clean(logits[i]);
    __threadfence();
    c.group.sync();
    if (c.rank == 0) {
      for (int i = threadIdx.x; i < w; i += kThreads)
        window[i] = history[(len - w + i) % history_cap];
      __syncthreads();
      // Each distinct token once, by the thread holding its first occurrence.
      for (int i = threadIdx.x; i < w; i += kThreads) {
        const int id = window[i];
        if (id < 0 || id >= n) continue;
        bool first = true;
        for (int j = 0; j < i && first; ++j) first = window[j] != id;
        if (!first) continue;
        int count = 0;
        for (int j = i; j < w; ++j) count += window[j] == id;
        float l = work[id];
        if (rep) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
        work[id] = l - (float(count) * p.frequency_penalty + p.presence_penalty);
      }
      __threadfence();
    }
    c.group.sync();
  }
  const float* src = p.penalize ? work : logits;
  const int picked = draw_from_row([src](int i) { return clean(src[i]); }, n, p, next_pos, c);
  if (c.rank != 0 || threadIdx.x != 0) return;
  if (rows) {
    ids[row] = picked;
    return;
  }
  *token = picked;
  *pos = next_pos;
  history[len % history_cap] = picked;
  *history_len = len + 1;
  *reinterpret_cast<volatile int32_t*>(host_token) = picked;
  __threadfence_system();  // the host reads it after the event behind this kernel
}

// A launch of `clusters` clusters of `blocks` blocks (cfg points at attr: not copyable).
struct ClusterLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr = {};
  ClusterLaunch(unsigned blocks, unsigned clusters, cudaStream_t stream) {
    cfg.gridDim = dim3(blocks * clusters);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = blocks, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
};

}  // namespace

int sample_pick_cluster_blocks(int64_t n) {
  // Asked of the device once: whether it runs a 16-block cluster of this kernel.
  static const bool large_ok = [] {
    if (cudaFuncSetAttribute(sample_pick_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) != cudaSuccess)
      return (void)cudaGetLastError(), false;
    const ClusterLaunch probe(kLargeCluster, 1, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, sample_pick_kernel, &probe.cfg) != cudaSuccess)
      return (void)cudaGetLastError(), false;
    return clusters > 0;
  }();
  return n >= kLargeClusterFrom && large_ok ? kLargeCluster : kPortableCluster;
}

cudaError_t launch_sample_pick(const float* logits, float* work, int64_t n,
                               const SamplePickParams& p, int32_t* history, int32_t* history_len,
                               int history_cap, int32_t* token, int32_t* pos, int32_t next_pos,
                               int32_t* host_token, cudaStream_t stream) {
  if (n <= 0 || n > INT_MAX || history_cap <= 0 || history_cap > kSampleHistoryMax ||
      (p.penalize && (p.repeat_last_n < 0 || p.repeat_last_n > history_cap)))
    return cudaErrorInvalidValue;
  const unsigned blocks = unsigned(sample_pick_cluster_blocks(n));
  const ClusterLaunch launch(blocks, 1, stream);
  const cudaError_t e = cudaLaunchKernelEx(&launch.cfg, sample_pick_kernel, logits, work, int(n), p,
                                           history, history_len, history_cap, token, pos, next_pos,
                                           host_token, static_cast<const SampleRowPick*>(nullptr),
                                           static_cast<int32_t*>(nullptr));
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

cudaError_t launch_sample_picks(const float* logits, int64_t n, const SampleRowPick* rows,
                                int64_t count, int32_t* ids, cudaStream_t stream) {
  if (n <= 0 || n > INT_MAX || count < 0 || count > 65535 || !rows || !ids)
    return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const unsigned blocks = unsigned(sample_pick_cluster_blocks(n));
  const ClusterLaunch launch(blocks, unsigned(count), stream);
  const cudaError_t e = cudaLaunchKernelEx(
      &launch.cfg, sample_pick_kernel, logits, static_cast<float*>(nullptr), int(n),
      SamplePickParams{}, static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), 1,
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int32_t(0),
      static_cast<int32_t*>(nullptr), rows, ids);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
