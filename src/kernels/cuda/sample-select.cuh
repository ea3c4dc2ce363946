// The cluster-wide pieces of the sampled pick (sample-pick.cu): collectives over a thread-block
// cluster, the ordered walk over ids, and the radix select that finds a top-k or top-p cut
// without sorting. Device code for one .cu; nothing here is a launch.
//
// Costs that shaped it (one H200 pick over 128k flat logits with top-p, 2026-12-03: 134 us
// before, 45 us now): the first radix pass took 44 us (a 64-bit shared atomic is a
// compare-and-swap loop, and the bins logits crowd into kept it retrying), every thread reading
// every block's bins through distributed shared memory ~5 us a pass, one warp walking 2048 bins
// in series 3-7 us a pass. Now a bin takes two 32-bit atomics with a carry, each block sums one
// slice of the bins across the cluster and every block gathers the slices, and the walk is a
// block-wide scan.
#pragma once

#include <cooperative_groups.h>

#include <climits>
#include <cstdint>

namespace hearth::cuda::sample {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;  // 32: warp 0's lanes reduce the warps' partials
constexpr int kMaxCluster = 16;
// The radix select's digits over a 32-bit key, most significant first: 11, 11, 10 bits.
constexpr int kPasses = 3;
__device__ __forceinline__ int digit_shift(int pass) {
  return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}
__device__ __forceinline__ int digit_width(int pass) {
  return pass == 2 ? 10 : 11;
}
constexpr int kBins = 2048;

// Larger float -> larger key (-inf lowest of the finite order; NaN is cleaned before).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_order_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

struct Shared {
  uint64_t warp_a[kWarps], warp_b[kWarps], warp_c[kWarps];  // the warps' partials
  uint64_t bins[kBins];                                     // this block's histogram of the pass
  uint64_t slice[kBins / 8];                 // the cluster's sums of this block's slice of the bins
  uint64_t part_a[2], part_b[2], part_c[2];  // this block's partials (by collective parity)
  uint64_t res_a, res_b, res_c;              // the cluster's results, for the block
  uint64_t before;                           // ordered_find: the earlier blocks' sums
  uint64_t cut_still;                        // find_cut: what the found bin must still supply
  int cut_bin;                               // find_cut: the found bin (-1: none)
  int found[2];                              // rank 0's: ordered_find's index (by parity)
};

// A block's 1024 threads' 64-bit partials: warp reductions, then warp 0 over the warps (max
// for a, sums for b and c); the block's result lands in lane 0 of warp 0.
struct Triple {
  uint64_t a = 0, b = 0, c = 0;
};
__device__ __forceinline__ Triple warp_reduce(Triple v) {
  for (int off = 16; off > 0; off >>= 1) {
    v.a = ::max(v.a, __shfl_xor_sync(0xffffffffu, v.a, off));
    v.b += __shfl_xor_sync(0xffffffffu, v.b, off);
    v.c += __shfl_xor_sync(0xffffffffu, v.c, off);
  }
  return v;
}

// The cluster's collectives. Each block reduces its threads, publishes the result in its shared
// memory (in one of two slots, alternating, so that a block running ahead into the next
// collective cannot overwrite what a slower block still reads: one cluster barrier each), and
// warp 0 reads every block's (one lane a block).
struct Cluster {
  cg::cluster_group group;
  Shared& sh;
  uint64_t* scratch;  // [kThreads]: find_cut's slice partials
  int rank;           // this block's
  int size;           // blocks (<= kMaxCluster)
  int all;            // threads
  int parity = 0;
  __device__ Shared& of(int r) { return *group.map_shared_rank(&sh, r); }

  // The cluster's max of a and sums of b and c, in every thread.
  __device__ Triple reduce(Triple v) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_reduce(v);
    if (lane == 0) sh.warp_a[warp] = v.a, sh.warp_b[warp] = v.b, sh.warp_c[warp] = v.c;
    __syncthreads();
    if (warp == 0) {
      Triple w{sh.warp_a[lane], sh.warp_b[lane], sh.warp_c[lane]};
      w = warp_reduce(w);
      if (lane == 0) sh.part_a[parity] = w.a, sh.part_b[parity] = w.b, sh.part_c[parity] = w.c;
    }
    group.sync();
    if (warp == 0) {
      Triple w;
      if (lane < size) {
        const Shared& o = of(lane);
        w = {o.part_a[parity], o.part_b[parity], o.part_c[parity]};
      }
      w = warp_reduce(w);
      if (lane == 0) sh.res_a = w.a, sh.res_b = w.b, sh.res_c = w.c;
    }
    __syncthreads();
    parity ^= 1;
    return {sh.res_a, sh.res_b, sh.res_c};
  }
  // The largest 64-bit key (the draw's packed score and index).
  __device__ uint64_t max_key(uint64_t v) { return reduce({v, 0, 0}).a; }
  // The largest value (through its order-preserving key).
  __device__ float max(float v) { return from_order_key(uint32_t(max_key(order_key(v)))); }
  // The smallest of the candidates (INT_MAX where a thread has none).
  __device__ int min_index(int candidate) {
    return INT_MAX - int(max_key(uint64_t(INT_MAX - candidate)));
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
  if (lane == 0) sh.warp_a[warp] = mine;
  if (c.rank == 0 && threadIdx.x == 0) sh.found[c.parity] = -1;
  __syncthreads();
  if (warp == 0) {
    uint64_t t = sh.warp_a[lane];
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (lane == 0) sh.part_b[c.parity] = t;
  }
  c.group.sync();
  // Where this warp's run starts in the sum: the earlier blocks' totals (a lane each), then the
  // earlier warps here.
  if (warp == 0) {
    uint64_t t = lane < c.rank ? c.of(lane).part_b[c.parity] : 0;
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (lane == 0) sh.before = t;
  }
  __syncthreads();
  uint64_t before = sh.before;
  for (int w = 0; w < warp; ++w) before += sh.warp_a[w];
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
        if (lane == __ffs(hit) - 1) c.of(0).found[c.parity] = i;
        break;
      }
      acc += __shfl_sync(0xffffffffu, inc, 31);
    }
  }
  c.group.sync();
  const int found = c.of(0).found[c.parity];
  c.parity ^= 1;
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

// bins[bin] += amount, exactly (amount < 2^40; a block's bin stays below 2^64). A bin is two
// 32-bit words: each active lane adds to the low word with a 32-bit shared atomic and carries
// into the high one. (A 64-bit shared atomic add is a compare-and-swap loop on this hardware,
// which warps crowding one bin kept retrying; aggregating a warp's equal bins first with
// match_any and a masked reduction cost more than it saved: the reductions run once per
// distinct bin. One H200 pass over 128k flat logits: 32 us that way, 4-5 us this way.)
__device__ __forceinline__ void add_to_bin(uint64_t* bins, uint32_t bin, uint64_t amount) {
  uint32_t* word = reinterpret_cast<uint32_t*>(&bins[bin]);  // [0] low, [1] high
  const uint32_t add_lo = uint32_t(amount), old = atomicAdd(&word[0], add_lo);
  const uint32_t add_hi = uint32_t(amount >> 32) + (old + add_lo < old ? 1u : 0u);
  if (add_hi) atomicAdd(&word[1], add_hi);
}

// Walking the kept set in (logit descending, id ascending) order and adding up each element's
// amount (1 per token, or its fixed-point mass), the element at which the sum first reaches
// `need` (>= 1): a radix select over the key digits (each block histograms its share, the
// cluster sums the bins, every block scans them), then the ids of the equal keys in order.
// Returns keep_all when the whole set's sum stays below need.
// need_fraction > 0 (top-p) asks for need = max(1, need_fraction * the set's whole sum) instead:
// the first pass's bins hold every kept element, so their sum is that total.
template <class Value, class Amount>
__device__ Cut find_cut(Value value, int n, const Stages& st, uint64_t need, Amount amount,
                        Cluster& c, float need_fraction = 0.0f) {
  Shared& sh = c.sh;
  const int slice = kBins / c.size;  // bins each block sums across the cluster
  const int stride = kThreads / slice;
  uint32_t prefix = 0, mask = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const int shift = digit_shift(pass), width = digit_width(pass);
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.bins[b] = 0;
    __syncthreads();
    for (int i = c.rank * kThreads + int(threadIdx.x); i < n; i += c.all) {
      const float l = value(i);
      const uint32_t k = order_key(l);
      if ((k & mask) == prefix && st.keeps(k, i))
        add_to_bin(sh.bins, (k >> shift) & ((1u << width) - 1), amount(l));
    }
    c.group.sync();
    // This block's slice of the bins, summed over the cluster's blocks (each thread a bin and
    // every stride-th block), then the partials of a bin added by one thread.
    {
      const int j = int(threadIdx.x) % slice, r0 = int(threadIdx.x) / slice;
      uint64_t t = 0;
      for (int r = r0; r < c.size; r += stride) t += c.of(r).bins[c.rank * slice + j];
      c.scratch[threadIdx.x] = t;
    }
    if (threadIdx.x == 0) sh.cut_bin = -1;
    __syncthreads();
    if (int(threadIdx.x) < slice) {
      uint64_t t = 0;
      for (int r = 0; r < stride; ++r) t += c.scratch[r * slice + int(threadIdx.x)];
      sh.slice[threadIdx.x] = t;
    }
    c.group.sync();
    // Every block gathers the summed bins (thread t: bins top - 2t and top - 2t - 1, from the
    // blocks that own them) and scans them from the top: the thread whose pair crosses need
    // names the bin and what it must still supply.
    const int top = (1 << width) - 1;
    const int hi_bin = top - 2 * int(threadIdx.x), lo_bin = hi_bin - 1;
    const uint64_t b0 = hi_bin >= 0 ? c.of(hi_bin / slice).slice[hi_bin % slice] : 0;
    const uint64_t b1 = lo_bin >= 0 ? c.of(lo_bin / slice).slice[lo_bin % slice] : 0;
    const uint64_t pair = b0 + b1;
    // Inclusive block scan of the pairs.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint64_t inc = pair;
    for (int off = 1; off < 32; off <<= 1) {
      const uint64_t o = __shfl_up_sync(0xffffffffu, inc, off);
      if (lane >= off) inc += o;
    }
    if (lane == 31) sh.warp_b[warp] = inc;
    __syncthreads();
    if (warp == 0) {
      const uint64_t w = sh.warp_b[lane];
      uint64_t winc = w;
      for (int off = 1; off < 32; off <<= 1) {
        const uint64_t o = __shfl_up_sync(0xffffffffu, winc, off);
        if (lane >= off) winc += o;
      }
      sh.warp_c[lane] = winc - w;       // the earlier warps' sum
      if (lane == 31) sh.res_c = winc;  // the whole set's sum
    }
    __syncthreads();
    inc += sh.warp_c[warp];
    if (pass == 0 && need_fraction > 0.0f)
      need = ::max(uint64_t(1), uint64_t(double(need_fraction) * double(sh.res_c)));
    const uint64_t above = inc - pair;
    if (inc >= need && above < need) {  // one thread: the crossing pair
      const bool first = above + b0 >= need;
      sh.cut_bin = first ? hi_bin : lo_bin;
      sh.cut_still = need - above - (first ? 0 : b0);
    }
    __syncthreads();
    const int bin = sh.cut_bin;
    const uint64_t still = sh.cut_still;
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

}  // namespace hearth::cuda::sample
