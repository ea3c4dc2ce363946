// The sampled pick on CUDA: the sampler chain of sampling/sampler.h (penalties -> top-k -> top-p
// -> min-p -> temperature -> seeded draw) over one row of logits, so a chained decode keeps
// drawing on the device. Nothing is sorted: top-k and top-p find their cut by a radix select over
// order-preserving 32-bit keys of the logits (11-, 11- and 10-bit passes), counting tokens for
// top-k and adding up probability mass for top-p. Masses are 2^-40 fixed point in 64-bit
// integers, so every sum is exact and independent of the order threads add in. The draw is a
// Gumbel-max over the kept set (each id's variate from the seed, the position and the id), so
// the same seed draws the same tokens on every run; the distribution is the host sampler's, the
// tokens are not the host's (its draw walks one uniform through the weights).
// One thread-block cluster of 8 or 16 blocks runs it (one block was bound by one SM's
// instruction rate: ~0.16 ms a token at 32k ids, ~0.6 ms at 128k); the blocks combine their
// partial maxima, sums and histograms through distributed shared memory at cluster barriers.
#include <cooperative_groups.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/argmax-ops.h"

namespace hearth::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
// Blocks in the cluster: the portable 8, or 16 (non-portable, where the device allows it) for
// large vocabularies, whose passes cost more than the cluster's barriers.
constexpr int kPortableCluster = 8, kLargeCluster = 16;
constexpr int64_t kLargeClusterFrom = 65536;  // ids
// The radix select's digits over a 32-bit key, most significant first: 11, 11, 10 bits.
constexpr int kPasses = 3;
__device__ __forceinline__ int digit_shift(int pass) {
  return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}
__device__ __forceinline__ int digit_width(int pass) {
  return pass == 2 ? 10 : 11;
}
constexpr int kBins = 2048;
constexpr double kFixedOne = 1099511627776.0;  // 2^40: a weight of 1 in fixed point

__device__ __forceinline__ float clean(float v) {
  return isnan(v) ? -INFINITY : v;
}

// Larger float -> larger key (-inf lowest of the finite order; NaN is cleaned before).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_order_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

__device__ __forceinline__ uint64_t fixed_weight(float w) {
  return uint64_t(double(w) * kFixedOne);  // w in [0, 1]
}

// splitmix64: the draw's variates from (seed, position, id), the same on every run.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Shared {
  uint64_t warp_sums[kWarps];
  uint64_t bins[kBins];
  uint64_t value;         // this block's partial (max), read by the others
  uint64_t block_total;   // ordered_find: this block's sum, read by the later blocks
  uint64_t block_before;  // ordered_find: the earlier blocks' sums
  int ivalue;             // this block's partial (min index); rank 0's: a found index
};

// The cluster's collectives. Each starts with the block's own reduction, publishes it in its
// shared memory, and reads every block's at a cluster barrier; a second barrier keeps a block
// from overwriting its partial while another still reads it.
struct Cluster {
  cg::cluster_group group;
  Shared& sh;
  uint64_t* tot;  // [kBins]: the cluster's summed histogram, this block's copy
  int rank;       // this block's
  int size;       // blocks
  int all;        // threads
  __device__ Shared& of(int r) { return *group.map_shared_rank(&sh, r); }

  // The largest 64-bit key (the draw's packed score and index).
  __device__ uint64_t max_key(uint64_t v) {
    for (int off = 16; off > 0; off >>= 1) v = ::max(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();
    if (threadIdx.x % 32 == 0) sh.warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t b = 0;
      for (int w = 0; w < kWarps; ++w) b = ::max(b, sh.warp_sums[w]);
      sh.value = b;
    }
    group.sync();
    uint64_t best = 0;
    for (int r = 0; r < size; ++r) best = ::max(best, of(r).value);
    group.sync();
    return best;
  }
  // The largest value (through its order-preserving key).
  __device__ float max(float v) { return from_order_key(uint32_t(max_key(order_key(v)))); }

  // The smallest of the candidates (INT_MAX where a thread has none).
  __device__ int min_index(int candidate) {
    if (threadIdx.x == 0) sh.ivalue = INT_MAX;
    __syncthreads();
    if (candidate != INT_MAX) atomicMin(&sh.ivalue, candidate);
    group.sync();
    int m = INT_MAX;
    for (int r = 0; r < size; ++r) m = min(m, of(r).ivalue);
    group.sync();
    return m;
  }
};

// The first index in [0, n) whose value is m (INT_MAX when none), in every thread.
template <class Value>
__device__ int first_index_of(Value value, int n, float m, Cluster& c) {
  int first = INT_MAX;
  for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all)
    if (value(i) == m) {
      first = i;
      break;
    }
  return c.min_index(first);
}

// Walking [0, n) in index order and adding amount(i) (0 for an index that does not count), the
// first index at which the running sum exceeds `target`, in every thread; -1 when the whole sum
// stays at or below it. Each warp of the cluster owns a contiguous run of indices and reads it 32
// at a time (coalesced); the warp whose run holds the crossing finds it with a warp scan per 32.
template <class Amount>
__device__ int ordered_find(int n, uint64_t target, Amount amount, Cluster& c) {
  Shared& sh = c.sh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int run = (n + c.all - 1) / c.all * 32;
  const int gw = c.rank * kWarps + warp;  // the warp's place in the cluster
  const int w0 = min(n, gw * run), w1 = min(n, w0 + run);
  uint64_t mine = 0;
  for (int i = w0 + lane; i < w1; i += 32) mine += amount(i);
  for (int off = 16; off > 0; off >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, off);
  if (lane == 0) sh.warp_sums[warp] = mine;
  if (c.rank == 0 && threadIdx.x == 0) sh.ivalue = -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
    for (int w = 0; w < kWarps; ++w) total += sh.warp_sums[w];
    sh.block_total = total;
  }
  c.group.sync();
  // Where this warp's run starts in the sum: the earlier blocks' totals (one remote read each,
  // by one thread, where every thread reading every earlier warp's partial took up to 15 x 32
  // dependent reads of distributed shared memory), then the earlier warps here.
  if (threadIdx.x == 0) {
    uint64_t before = 0;
    for (int r = 0; r < c.rank; ++r) before += c.of(r).block_total;
    sh.block_before = before;
  }
  __syncthreads();
  uint64_t before = sh.block_before;
  for (int w = 0; w < warp; ++w) before += sh.warp_sums[w];
  if (before <= target && target < before + mine) {  // the same in the whole warp
    uint64_t acc = before;
    for (int base = w0; base < w1; base += 32) {
      const int i = base + lane;
      const uint64_t a = i < w1 ? amount(i) : 0;
      uint64_t inc = a;
      for (int off = 1; off < 32; off <<= 1) {
        const uint64_t o = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= off) inc += o;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, acc + inc > target);
      if (hit) {
        if (lane == __ffs(hit) - 1) c.of(0).ivalue = i;
        break;
      }
      acc += __shfl_sync(0xffffffffu, inc, 31);
    }
  }
  c.group.sync();
  const int found = c.of(0).ivalue;
  c.group.sync();
  return found;
}

// The set every stage narrows: what the previous stages keep, as cuts in (logit descending, id
// ascending) order (the last kept key and id; keep_all: no cut).
struct Cut {
  uint32_t key = 0;
  int id = INT_MAX;
  bool keep_all = true;
  __device__ bool keeps(uint32_t k, int i) const {
    return keep_all || k > key || (k == key && i <= id);
  }
};

struct Stages {
  Cut top_k, top_p, min_p;
  __device__ bool keeps(uint32_t k, int i) const {
    return top_k.keeps(k, i) && top_p.keeps(k, i) && min_p.keeps(k, i);
  }
};

// bins[bin] += amount for the active lanes, one shared-memory atomic per distinct bin of the
// warp: logits crowd into a few bins, and per-lane atomics on them would serialise the block.
// Every lane of the warp calls it (inactive ones with active = false). amount < 2^40.
__device__ __forceinline__ void add_to_bin(uint64_t* bins, uint32_t bin, uint64_t amount,
                                           bool active) {
  const uint32_t b = active ? bin : 0xFFFFFFFFu;
  const unsigned group = __match_any_sync(0xffffffffu, b);
  const uint64_t v = active ? amount : 0;
  // 64-bit sums in two 32-bit halves (at most 32 lanes: no half overflows).
  const uint32_t lo = __reduce_add_sync(group, uint32_t(v & 0xFFFFFu));
  const uint32_t hi = __reduce_add_sync(group, uint32_t(v >> 20));
  if (active && int(threadIdx.x % 32) == __ffs(group) - 1)
    atomicAdd(reinterpret_cast<unsigned long long*>(&bins[b]),
              (unsigned long long)((uint64_t(hi) << 20) + lo));
}

// Walking the kept set in (logit descending, id ascending) order and adding up each element's
// amount (1 per token, or its fixed-point mass), the element at which the sum first reaches
// `need` (>= 1): a radix select over the key digits (each block histograms its share, every
// block walks the cluster's summed bins), then the ids of the equal keys in order. Returns
// keep_all when the whole set's sum stays below need.
// need_fraction > 0 (top-p) asks for need = max(1, need_fraction * the set's whole sum) instead:
// the first pass's bins hold every kept element, so their sum is that total and no separate
// pass (and cluster barrier pair) computes it.
template <class Value, class Amount>
__device__ Cut find_cut(Value value, int n, const Stages& st, uint64_t need, Amount amount,
                        Cluster& c, float need_fraction = 0.0f) {
  Shared& sh = c.sh;
  uint32_t prefix = 0, mask = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const int shift = digit_shift(pass), width = digit_width(pass);
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.bins[b] = 0;
    __syncthreads();
    // (every lane of a warp runs the same iterations: add_to_bin needs the whole warp)
    for (int base = c.rank * kThreads; base < n; base += c.all) {
      const int i = base + int(threadIdx.x);
      const float l = i < n ? value(i) : -INFINITY;
      const uint32_t k = order_key(l);
      const bool active = i < n && (k & mask) == prefix && st.keeps(k, i);
      add_to_bin(sh.bins, (k >> shift) & ((1u << width) - 1), active ? amount(l) : 0, active);
    }
    c.group.sync();
    // The cluster's bins, summed into this block's tot (each thread two bins, 8 remote reads
    // each); then every block's bins may be zeroed for the next pass.
    const int top = (1 << width) - 1, per_lane = (top + 1 + 31) / 32;
    for (int b = threadIdx.x; b <= top; b += kThreads) {
      uint64_t t = 0;
      for (int r = 0; r < c.size; ++r) t += c.of(r).bins[b];
      c.tot[b] = t;
    }
    c.group.sync();
    // One warp walks the bins from the top: lane j holds the j-th run of them.
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      uint64_t mine = 0;
      for (int b = 0; b < per_lane; ++b)
        if (top - per_lane * lane - b >= 0) mine += c.tot[top - per_lane * lane - b];
      uint64_t inc = mine;
      for (int off = 1; off < 32; off <<= 1) {
        const uint64_t o = __shfl_up_sync(0xffffffffu, inc, off);
        if (lane >= off) inc += o;
      }
      const uint64_t above = inc - mine;
      if (pass == 0 && need_fraction > 0.0f) {
        const uint64_t total = __shfl_sync(0xffffffffu, inc, 31);
        need = ::max(uint64_t(1), uint64_t(double(need_fraction) * double(total)));
      }
      const unsigned hit = __ballot_sync(0xffffffffu, inc >= need);
      if (hit == 0) {
        if (lane == 0) sh.ivalue = -1;  // the set holds less than need: no cut
      } else if (lane == __ffs(hit) - 1) {
        uint64_t acc = above;
        int bin = top - per_lane * lane;
        for (int b = 0; b < per_lane && bin > 0; ++b, --bin) {
          if (acc + c.tot[bin] >= need) break;
          acc += c.tot[bin];
        }
        sh.ivalue = bin;
        sh.value = need - acc;  // still needed inside that bin
      }
    }
    __syncthreads();
    const int bin = sh.ivalue;
    const uint64_t still = sh.value;
    __syncthreads();
    if (bin < 0) return Cut{};
    prefix |= uint32_t(bin) << shift;
    mask |= ((1u << width) - 1) << shift;
    need = still;
  }
  // Equal keys: the ids in ascending order until the remaining need is met (sum >= need).
  const int id = ordered_find(
      n, need - 1,
      [&](int i) {
        const float l = value(i);
        const uint32_t k = order_key(l);
        return k == prefix && st.keeps(k, i) ? amount(l) : uint64_t(0);
      },
      c);
  Cut cut;
  cut.keep_all = false;
  cut.key = prefix;
  cut.id = id < 0 ? INT_MAX : id;
  return cut;
}

__global__ void __launch_bounds__(kThreads)
    sample_pick_kernel(const float* __restrict__ logits, float* __restrict__ work, int n,
                       SamplePickParams p, int32_t* history, int32_t* history_len, int history_cap,
                       int32_t* token, int32_t* pos, int32_t next_pos, int32_t* host_token) {
  __shared__ Shared sh;
  // The penalties' window (rank 0, before any stage) and the summed histogram share memory.
  __shared__ union {
    int32_t window[kSampleHistoryMax];
    uint64_t tot[kBins];
  } scratch;
  int32_t* const window = scratch.window;
  Cluster c{cg::this_cluster(), sh, scratch.tot, 0, 0, 0};
  c.rank = int(c.group.block_rank());
  c.size = int(c.group.num_blocks());
  c.all = c.size * kThreads;
  // Penalties over the window (the last repeat_last_n tokens of the history) go into a copy of
  // the logits; without them every stage reads the logits themselves.
  const bool rep = p.repeat_penalty != 1.0f;
  const int len = *history_len;
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
  const auto value = [src](int i) { return clean(src[i]); };

  float m = -INFINITY;
  for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all) m = fmaxf(m, value(i));
  m = c.max(m);

  int picked = -1;
  if (p.temperature <= 0.0f || !isfinite(m)) {
    // Greedy (or nothing to weigh): the first index of the max.
    const int first = first_index_of(value, n, m, c);
    picked = first == INT_MAX ? 0 : first;
  } else {
    Stages st;
    if (p.top_k > 0 && p.top_k < n)
      st.top_k = find_cut(
          value, n, st, uint64_t(p.top_k), [](float) { return uint64_t(1); }, c);
    if (p.top_p < 1.0f) {
      const auto mass = [m](float l) { return fixed_weight(__expf(l - m)); };
      st.top_p = find_cut(value, n, st, 0, mass, c, p.top_p);
    }
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
    // The draw (Gumbel-max): the kept token with the largest (l - m) / T + g_i, g_i a Gumbel
    // variate from (seed, position, id), is a draw from the kept set's softmax at temperature T.
    // One pass and one reduction, where a uniform against the running sum of weights takes a
    // sum, an ordered walk and their four cluster barriers.
    const float inv_t = 1.0f / p.temperature;
    const uint64_t stream = mix(p.seed ^ mix(uint64_t(next_pos) - 1));
    uint64_t best = 0;
    for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all) {
      const float l = value(i);
      if (!st.keeps(order_key(l), i)) continue;
      const double u = (double(mix(stream + uint64_t(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      const float score = float(double((l - m) * inv_t) - log(-log(u)));
      // Ties go to the lower id, as everywhere else in the chain.
      best = ::max(best, (uint64_t(order_key(score)) << 32) | uint32_t(INT_MAX - i));
    }
    best = c.max_key(best);
    picked = best != 0 ? INT_MAX - int(uint32_t(best)) : -1;
    // Nothing kept had a finite score: the best token (the same condition in every thread).
    if (picked < 0) picked = first_index_of(value, n, m, c);
  }
  if (c.rank != 0 || threadIdx.x != 0) return;
  *token = picked;
  *pos = next_pos;
  history[len % history_cap] = picked;
  *history_len = len + 1;
  *reinterpret_cast<volatile int32_t*>(host_token) = picked;
  __threadfence_system();  // the host reads it after the event behind this kernel
}

// A launch of one cluster of `blocks` blocks (cfg points at attr: not copyable).
struct ClusterLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr = {};
  ClusterLaunch(unsigned blocks, cudaStream_t stream) {
    cfg.gridDim = dim3(blocks);
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
    const ClusterLaunch probe(kLargeCluster, nullptr);
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
  const ClusterLaunch launch(blocks, stream);
  const cudaError_t e =
      cudaLaunchKernelEx(&launch.cfg, sample_pick_kernel, logits, work, int(n), p, history,
                         history_len, history_cap, token, pos, next_pos, host_token);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace hearth::cuda
