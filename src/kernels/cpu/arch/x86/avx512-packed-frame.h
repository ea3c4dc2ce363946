// The frame every AVX-512 packed layout shares (avx512-packed.cpp: Q4_0, MXFP4, Q8_0, F16;
// avx512-packed-q4k.cpp: Q4_K; avx512-packed-q6k.cpp: Q6_K): 16 rows per group, one row per
// 32-bit lane, token tiles over row groups, the weight stream's prefetch and its split into
// side-by-side streams. Internal to those files (compiled with the same AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

namespace hearth::kernels::avx512::packed {

inline constexpr int kRows = 16;

// Software prefetch this many bytes ahead of the weight stream: the L2 streamer stops at 4 KiB
// page boundaries, so without it every new page starts with a demand miss. Every line of every
// unit: session 12 measured F16 prefetching every other line (leaving the odd ones to the
// adjacent-line prefetcher) at 21-22 GB/s against 26-27 for every line, and the Q4_K
// super-block's 320 bytes of scales unprefetched at 23.2-23.5 against 23.7-24.5 (the 1B
// decode's matmuls in sequence, alternating runs).
inline constexpr int kPrefetchAhead = 2048;

inline void prefetch_ahead(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + o), _MM_HINT_T0);
}

// The loop every packed gemm shares: token tiles of up to kTile (outer, so a tile's activations
// stay in L1 across the row groups), row groups [g0, g1) inner. group(tile, wg, t0, yg) runs
// one group against the tile; `tile` is std::integral_constant<int, tokens in this tile>, so
// each tail size gets its own register-blocked instantiation.
template <int kTile, class Fn>
void dispatch_tile(int nt, Fn&& fn) {
  if constexpr (kTile > 1) {
    if (nt < kTile) return dispatch_tile<kTile - 1>(nt, fn);
  }
  fn(std::integral_constant<int, kTile>{});
}

template <int kTile, class GroupFn>
void for_each_tile(const uint8_t* w, uint64_t group_bytes, int64_t g0, int64_t g1, int64_t n_tokens,
                   float* y, GroupFn&& group) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const int nt = int(n_tokens - t0 < kTile ? n_tokens - t0 : kTile);
    for (int64_t g = g0; g < g1; ++g)
      dispatch_tile<kTile>(
          nt, [&](auto tile) { group(tile, w + uint64_t(g) * group_bytes, t0, y + g * kRows); });
  }
}

// A group's dot products, optionally as several streams walked in lockstep. One token (decode)
// is bound by memory, and one sequential stream per thread leaves most of the L2 streamer's
// trackers idle (a file-backed read here: ~22 GB/s with one stream a thread, ~28 with four).
// With kSplit > 1 and NT == 1 the group's `units` (column pairs, super-blocks) are cut into
// kSplit equal ranges read side by side, plus a tail; wider tiles are compute-heavier and keep
// one stream (the token tile takes the registers). Measured (session 8, 2 threads, weights on
// 2 MiB pages; hearth-decode-bench 2048x5632 as % of a plain read, then 1B tg128 as % of the
// roofline, alternating runs): Q4_0 1 stream 69-74% / 66%, 2 streams 82-84% / 73-75%, 4 streams
// 78-83% / 64-65%; Q8_0 71-73% / 59-60%, 83-84% / 61-65%, 78-82% / 59-62%; Q4_K 68-70% / 61%,
// 73-74% / 62%, 74-76% / 54%; F16 (session 3, in the model) 4 streams 61-62% against 49-50%
// with one. Session 12, with every line prefetched and contiguous shares per thread (the 1B
// decode's matmuls in sequence, three alternating rounds): F16 1 stream 25.4-26.6 GB/s, 2
// streams 26.2-27.5, 4 streams 26.1-26.5. So every layout reads 2.
// streams(G, w, stride_bytes, stride_units, first_unit, units, acc) runs G streams, stream i
// over units [first_unit + i * stride_units, ... + units) whose bytes start at
// w + i * stride_bytes, into acc[i][t]; the sum lands at y + (t0 + t) * y_stride. Only the
// summation order changes.
template <int NT, int kSplit, class Streams>
void run_streams(const uint8_t* w, int64_t units, uint64_t unit_bytes, float* y, int64_t t0,
                 int64_t y_stride, Streams&& streams) {
  __m512 out[NT];
  const int64_t len = NT == 1 && kSplit > 1 ? units / kSplit : 0;
  int64_t done = 0;
  for (int t = 0; t < NT; ++t) out[t] = _mm512_setzero_ps();
  if (len > 0) {
    // The next group's streams after the first start where no look-ahead reaches (stream 0
    // continues this group's last stream): prefetch their heads now, a group's time ahead.
    // Session 12, the 1B decode's matmuls in sequence, pairs of runs: Q4_0 +3 +4 -2 +11 -2%,
    // Q8_0 +13 +9%, F16 +2 +1 +5%, Q4_K -7 +3%.
    const uint8_t* next = w + uint64_t(units) * unit_bytes;
    for (int i = 1; i < kSplit; ++i)
      for (int o = 0; o < kPrefetchAhead; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + uint64_t(i * len) * unit_bytes + o),
                     _MM_HINT_T0);
    __m512 acc[kSplit][NT];
    streams(std::integral_constant<int, kSplit>{}, w, uint64_t(len) * unit_bytes, len, 0, len, acc);
    for (int i = 0; i < kSplit; ++i)
      for (int t = 0; t < NT; ++t) out[t] = _mm512_add_ps(out[t], acc[i][t]);
    done = kSplit * len;
  }
  if (done < units) {
    __m512 acc[1][NT];
    streams(std::integral_constant<int, 1>{}, w + uint64_t(done) * unit_bytes, 0, 0, done,
            units - done, acc);
    for (int t = 0; t < NT; ++t) out[t] = _mm512_add_ps(out[t], acc[0][t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + (t0 + t) * y_stride, out[t]);
}

// A layout's gemm: token tiles of up to kTile (for_each_tile) over row groups of `units` units of
// unit_bytes each, every group read by run_streams as 2 streams. streams(tile, g, w, stride_bytes,
// stride_units, first_unit, units, t0, acc) is the layout's loop (see run_streams), with `tile`
// and `g` the integral constants of tokens and streams; each layout's loop takes these arguments
// first, then its own.
template <int kTile, class Streams>
void gemm_streams(const uint8_t* w, int64_t g0, int64_t g1, int64_t units, uint64_t unit_bytes,
                  int64_t n_tokens, float* y, int64_t y_stride, Streams&& streams) {
  for_each_tile<kTile>(
      w, uint64_t(units) * unit_bytes, g0, g1, n_tokens, y,
      [&](auto tile, const uint8_t* wg, int64_t t0, float* yg) {
        run_streams<decltype(tile)::value, 2>(
            wg, units, unit_bytes, yg, t0, y_stride,
            [&](auto g, const uint8_t* ws, uint64_t sb, int64_t su, int64_t first, int64_t n_units,
                auto& acc) { streams(tile, g, ws, sb, su, first, n_units, t0, acc); });
      });
}

// acc + (u8 lanes of w) . (the 4 signed bytes at x, broadcast), with the broadcast folded into
// the instruction: GCC emits a separate vpbroadcastd for the intrinsic form.
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int32_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
  return acc;
}

}  // namespace hearth::kernels::avx512::packed
