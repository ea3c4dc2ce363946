// AMX prefill GEMM (TDPBF16PS): per 32 weight rows a bf16 panel of B tiles, reused by every token
// tile of bf16 activations. Extend: a direct panel builder per packed layout (build_q4_0_half).
#include "kernels/cpu/arch/x86/amx-gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/cpu-features.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::amx {

namespace {

constexpr int64_t kBlockRows = 32;   // weight rows per work item: two B tiles
constexpr int64_t kBlockTok = 32;    // tokens per accumulator block: two A tiles
constexpr int64_t kTileK = 32;       // bf16 elements of K per tile (64-byte rows)
constexpr int64_t kTile = 16;        // rows (tokens) of A, columns (weight rows) of B and C
constexpr int64_t kTileElems = 512;  // bf16 per 1 KB tile

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// The 64-byte LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles 0-3: accumulators C [16 tokens][16 weight rows] f32 (row-major, like Y). 4-5: A, 16
// tokens x 32 bf16 of K. 6-7: B, 16 rows of pairs: row p holds (w[r][2p], w[r][2p+1]) for the
// 16 weight rows r. Every tile is 16 rows of 64 bytes; operands are stored as 1 KB contiguous
// tiles (rows 4 KB apart would alias in L1).
void load_tile_config() {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

__mmask16 mask_of(int64_t len) {
  return len >= 16 ? __mmask16(0xFFFF) : len <= 0 ? __mmask16(0) : __mmask16((1u << len) - 1);
}

// 32 floats (the first `len`, zeros after) -> 32 bf16 in order, round-to-nearest-even.
__m512i to_bf16(const float* src, int64_t len) {
  const __m512 lo = _mm512_maskz_loadu_ps(mask_of(len), src);
  const __m512 hi = _mm512_maskz_loadu_ps(mask_of(len - 16), src + 16);
  return __m512i(_mm512_cvtne2ps_pbh(hi, lo));
}

__m512 bf16_to_f32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// X [T, n] -> A tiles [t_pad / 16][k_pad / 32], zero-padded past T and n.
void pack_activations(const float* x, int64_t n_tokens, int64_t n, int64_t k_pad, uint16_t* out,
                      int64_t t0, int64_t t1) {
  const int64_t kt_count = k_pad / kTileK;
  for (int64_t t = t0; t < t1; ++t) {
    uint16_t* row = out + (t / kTile) * kt_count * kTileElems + (t % kTile) * kTileK;
    for (int64_t kt = 0; kt < kt_count; ++kt) {
      const int64_t len = t < n_tokens ? std::min(kTileK, n - kt * kTileK) : 0;
      const __m512i v = len > 0 ? to_bf16(x + t * n + kt * kTileK, len) : _mm512_setzero_si512();
      _mm512_storeu_si512(row + kt * kTileElems, v);
    }
  }
}

struct ThreadScratch {
  std::vector<float> rows;      // 16 x n (or group_rows x n), the source's f32 rows
  std::vector<uint16_t> panel;  // planes x [k_pad / 32][2 B tiles]
  alignas(64) float c[kTile * kTile];
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch s;
  return s;
}

std::vector<uint16_t>& activation_scratch() {
  thread_local std::vector<uint16_t> v;
  return v;
}

// Panel index of B tile (k tile kt, half h of the 32 rows).
uint16_t* b_tile(uint16_t* plane, int64_t kt, int64_t h) {
  return plane + (kt * 2 + h) * kTileElems;
}

// 16 vectors of 16 dwords, transposed in place (4 shuffle stages, 64 shuffles).
void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a01 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i b01 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i a23 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i b23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    r[j] = _mm512_shuffle_i32x4(a01, b01, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + j] = _mm512_shuffle_i32x4(a01, b01, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + j] = _mm512_shuffle_i32x4(a23, b23, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + j] = _mm512_shuffle_i32x4(a23, b23, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// 16 f32 rows [rows][n] (zeros from row `rows` on) -> the B tiles of half h: each row's 32
// values of a k tile are 16 pairs, and pair p of row r goes to tile row p, column r: a 16x16
// dword transpose. With split, the rest w - bf16(w) fills the lo plane the same way.
void rows_to_b_tiles(const float* w, int64_t rows, int64_t n, int64_t k_pad, int64_t h,
                     uint16_t* hi, uint16_t* lo) {
  for (int64_t kt = 0; kt < k_pad / kTileK; ++kt) {
    const int64_t k0 = kt * kTileK, len = std::min(kTileK, n - k0);
    __m512i vh[16], vl[16];
    for (int64_t r = 0; r < kTile; ++r) {
      vh[r] = vl[r] = _mm512_setzero_si512();
      if (r >= rows || len <= 0) continue;
      const float* src = w + r * n + k0;
      vh[r] = to_bf16(src, len);
      if (!lo) continue;
      alignas(64) float rest[32];
      const __m512 w0 = _mm512_maskz_loadu_ps(mask_of(len), src);
      const __m512 w1 = _mm512_maskz_loadu_ps(mask_of(len - 16), src + 16);
      _mm512_store_ps(rest, _mm512_sub_ps(w0, bf16_to_f32(_mm512_castsi512_si256(vh[r]))));
      _mm512_store_ps(rest + 16,
                      _mm512_sub_ps(w1, bf16_to_f32(_mm512_extracti64x4_epi64(vh[r], 1))));
      vl[r] = to_bf16(rest, 32);
    }
    transpose16(vh);
    uint16_t* th = b_tile(hi, kt, h);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(th + p * kTileK, vh[p]);
    if (!lo) continue;
    transpose16(vl);
    uint16_t* tl = b_tile(lo, kt, h);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tl + p * kTileK, vl[p]);
  }
}

// bf16 words [a0..a15, b0..b15] -> pairs (a_r, b_r) per dword: two f32 rows of 16 into the
// B tile's row pairs.
inline __m512i bf16_pair_interleave() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                          6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
}

// The 16 rows' fp16 scales of block column `half` (0, 1) of a packed Q4_0/Q8_0 column pair.
inline __m512 column_scales(const uint8_t* pair, int half) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pair + half * 32)));
}

// The AVX-512 Q4_0 packed layout, version 1 (avx512-packed.cpp): its 16-row groups already
// keep one weight row per 32-bit lane, so each 64-byte vector k of a block column expands
// straight into four B tile rows (pairs 2k, 2k+1 from the low nibbles, 8+2k, 9+2k from the
// high ones), no f32 round trip. Values are exactly d * (q - 8) rounded once, as unpack_rows
// then to_bf16 would give (tests compare the two).
constexpr int kQ4_0LayoutVersion = 1;
constexpr uint64_t kQ4_0PairBytes = 64 + 2 * 4 * 64;

void build_q4_0_half(const uint8_t* packed, int64_t g, int64_t n, uint16_t* plane, int64_t h) {
  const int64_t nb = n / kQK32;
  const uint8_t* in = packed + uint64_t(g) * uint64_t(nb / 2) * kQ4_0PairBytes;
  const __m512i m4 = _mm512_set1_epi32(0x0F0F0F0F), mbyte = _mm512_set1_epi32(0xFF);
  const __m512i interleave = bf16_pair_interleave();
  for (int64_t c = 0; c < nb; c += 2, in += kQ4_0PairBytes) {
    for (int half = 0; half < 2; ++half) {
      const __m512 d = column_scales(in, half);
      const __m512 neg8d = _mm512_mul_ps(d, _mm512_set1_ps(-8.f));
      uint16_t* tile = b_tile(plane, c + half, h);
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_load_si512(in + 64 + half * 256 + k * 64);
        for (int nib = 0; nib < 2; ++nib) {
          const __m512i q = _mm512_and_si512(nib ? _mm512_srli_epi32(v, 4) : v, m4);
          __m512 f[4];
          for (int j = 0; j < 4; ++j) {
            const __m512i e = _mm512_and_si512(_mm512_srli_epi32(q, 8 * j), mbyte);
            f[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(e), d, neg8d);  // exact: d * (q - 8)
          }
          const int p = 8 * nib + 2 * k;
          const __m512i r0 =
              _mm512_permutexvar_epi16(interleave, __m512i(_mm512_cvtne2ps_pbh(f[1], f[0])));
          const __m512i r1 =
              _mm512_permutexvar_epi16(interleave, __m512i(_mm512_cvtne2ps_pbh(f[3], f[2])));
          _mm512_storeu_si512(tile + p * kTileK, r0);
          _mm512_storeu_si512(tile + (p + 1) * kTileK, r1);
        }
      }
    }
  }
}

// The AVX-512 Q8_0 packed layout, version 1: per pair of block columns 16 + 16 fp16 scales,
// then per column 32 x 16 bytes (element j of the 16 rows). Elements 2p and 2p+1 give B tile
// row p; with split, lo = w - bf16(w) as in rows_to_b_tiles (tests compare the two paths).
constexpr int kQ8_0LayoutVersion = 1;
constexpr uint64_t kQ8_0PairBytes = 64 + 2 * 32 * 16;

void build_q8_0_half(const uint8_t* packed, int64_t g, int64_t n, uint16_t* hi, uint16_t* lo,
                     int64_t h) {
  const int64_t nb = n / kQK32;
  const uint8_t* in = packed + uint64_t(g) * uint64_t(nb / 2) * kQ8_0PairBytes;
  const __m512i interleave = bf16_pair_interleave();
  for (int64_t c = 0; c < nb; c += 2, in += kQ8_0PairBytes) {
    for (int half = 0; half < 2; ++half) {
      const __m512 d = column_scales(in, half);
      const uint8_t* q = in + 64 + half * 512;
      uint16_t* th = b_tile(hi, c + half, h);
      uint16_t* tl = lo ? b_tile(lo, c + half, h) : nullptr;
      for (int p = 0; p < 16; ++p) {
        const __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(
                                            reinterpret_cast<const __m128i*>(q + 2 * p * 16)))),
                                        d);
        const __m512 f1 = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                _mm_load_si128(reinterpret_cast<const __m128i*>(q + (2 * p + 1) * 16)))),
            d);
        const __m512i b = __m512i(_mm512_cvtne2ps_pbh(f1, f0));  // [f0 | f1] as bf16
        _mm512_storeu_si512(th + p * kTileK, _mm512_permutexvar_epi16(interleave, b));
        if (!tl) continue;
        const __m512 r0 = _mm512_sub_ps(f0, bf16_to_f32(_mm512_castsi512_si256(b)));
        const __m512 r1 = _mm512_sub_ps(f1, bf16_to_f32(_mm512_extracti64x4_epi64(b, 1)));
        const __m512i rb = __m512i(_mm512_cvtne2ps_pbh(r1, r0));
        _mm512_storeu_si512(tl + p * kTileK, _mm512_permutexvar_epi16(interleave, rb));
      }
    }
  }
}

// Weight rows [r0, r0 + 32) (zeros past d) -> B-tile panel plane(s) [k_pad / 32][2][1 KB].
void build_panel(const RowSource& src, int64_t d, int64_t n, int64_t k_pad, int64_t r0, bool split,
                 ThreadScratch& s) {
  uint16_t* hi = s.panel.data();
  uint16_t* lo = split ? hi + (k_pad / kTileK) * 2 * kTileElems : nullptr;
  const PackedLayout* l = src.layout;
  if (!split && l == &avx512::q4_0_packed && l->version == kQ4_0LayoutVersion &&
      l->group_rows == kTile && n % (2 * kQK32) == 0) {
    for (int64_t h = 0; h < 2; ++h) {
      if (r0 + h * kTile < d)
        build_q4_0_half(src.packed, (r0 + h * kTile) / kTile, n, hi, h);
      else
        for (int64_t kt = 0; kt < k_pad / kTileK; ++kt)
          std::memset(b_tile(hi, kt, h), 0, kTileElems * 2);
    }
    return;
  }
  // 16 rows at a time (a source's group divides 16: packed layouts have 16, the table 1).
  if (l == &avx512::q8_0_packed && l->version == kQ8_0LayoutVersion && l->group_rows == kTile &&
      n % (2 * kQK32) == 0) {
    for (int64_t h = 0; h < 2; ++h) {
      if (r0 + h * kTile < d) {
        build_q8_0_half(src.packed, (r0 + h * kTile) / kTile, n, hi, lo, h);
        continue;
      }
      for (int64_t kt = 0; kt < k_pad / kTileK; ++kt) {
        std::memset(b_tile(hi, kt, h), 0, kTileElems * 2);
        if (lo) std::memset(b_tile(lo, kt, h), 0, kTileElems * 2);
      }
    }
    return;
  }
  const int64_t g = src.group_rows;
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t rb = r0 + h * kTile, rows = std::max<int64_t>(0, std::min(kTile, d - rb));
    for (int64_t i = 0; i < rows; i += g)
      src.fill(src.ctx, rb + i, std::min(g, rows - i), n, s.rows.data() + i * n);
    rows_to_b_tiles(s.rows.data(), rows, n, k_pad, h, hi, lo);
  }
}

// An accumulator = tokens [t0, t0 + 16) x rows [r0, r0 + 16) -> y, clipped to T x d.
// store(ptr, stride) runs the TILESTORED: GCC's tile intrinsics paste their tile number into
// the asm text, so it must be a literal at the call site.
template <class StoreTile>
void store_c(StoreTile store, ThreadScratch& s, int64_t t0, int64_t r0, int64_t d, int64_t n_tokens,
             float* y, int64_t y_stride) {
  if (t0 >= n_tokens || r0 >= d) return;
  if (t0 + kTile <= n_tokens && r0 + kTile <= d) {
    store(y + t0 * y_stride + r0, y_stride * int64_t(sizeof(float)));
    return;
  }
  store(s.c, int64_t(kTile * sizeof(float)));
  const __mmask16 m = mask_of(d - r0);
  for (int64_t t = t0; t < std::min(n_tokens, t0 + kTile); ++t)
    _mm512_mask_storeu_ps(y + t * y_stride + r0, m, _mm512_load_ps(s.c + (t - t0) * kTile));
}

void run_bf16(const RowSource& src, int64_t d, int64_t n, PrefillPrecision prec, const float* x,
              int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  if (d <= 0 || n <= 0 || n_tokens <= 0) return;
  const bool split = prec == PrefillPrecision::kSplitWeights;
  const int64_t k_pad = round_up(n, kTileK), kt_count = k_pad / kTileK;
  const int64_t t_pad = round_up(n_tokens, kBlockTok);
  std::vector<uint16_t>& act = activation_scratch();
  act.resize(size_t(t_pad * k_pad));
  uint16_t* a_tiles = act.data();
  pool.parallel_for(t_pad, 4, [&](int64_t t0, int64_t t1) {
    pack_activations(x, n_tokens, n, k_pad, a_tiles, t0, t1);
  });

  const int64_t n_blocks = (d + kBlockRows - 1) / kBlockRows;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    ThreadScratch& s = thread_scratch();
    s.rows.resize(size_t(std::max(src.group_rows, kTile) * n));
    s.panel.resize(size_t((split ? 2 : 1) * kt_count * 2 * kTileElems));
    load_tile_config();
    const uint16_t* b_hi = s.panel.data();
    const uint16_t* b_lo = b_hi + kt_count * 2 * kTileElems;
    for (;;) {
      const int64_t blk = next.fetch_add(1, std::memory_order_relaxed);
      if (blk >= n_blocks) break;
      const int64_t r0 = blk * kBlockRows;
      build_panel(src, d, n, k_pad, r0, split, s);
      for (int64_t t0 = 0; t0 < t_pad; t0 += kBlockTok) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint16_t* a0 = a_tiles + (t0 / kTile) * kt_count * kTileElems;
        const uint16_t* a1 = a0 + kt_count * kTileElems;
        for (int64_t kt = 0; kt < kt_count; ++kt) {
          _tile_loadd(4, a0 + kt * kTileElems, 64);
          _tile_loadd(5, a1 + kt * kTileElems, 64);
          // The two B tiles of step kt from one plane (hi, then lo when split) into all four C.
          const auto dot_plane = [&](const uint16_t* plane) {
            _tile_loadd(6, plane + kt * 2 * kTileElems, 64);
            _tile_loadd(7, plane + (kt * 2 + 1) * kTileElems, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          };
          dot_plane(b_hi);
          if (split) dot_plane(b_lo);
        }
        store_c([](void* p, int64_t st) { _tile_stored(0, p, st); }, s, t0, r0, d, n_tokens, y,
                y_stride);
        store_c([](void* p, int64_t st) { _tile_stored(1, p, st); }, s, t0, r0 + kTile, d, n_tokens,
                y, y_stride);
        store_c([](void* p, int64_t st) { _tile_stored(2, p, st); }, s, t0 + kTile, r0, d, n_tokens,
                y, y_stride);
        store_c([](void* p, int64_t st) { _tile_stored(3, p, st); }, s, t0 + kTile, r0 + kTile, d,
                n_tokens, y, y_stride);
      }
    }
    // Give the tile state back so this thread's context switches stay cheap for other work.
    _tile_release();
  });
}

const PrefillGemm kBf16Gemm = {"amx-bf16", run_bf16};

}  // namespace

const PrefillGemm* bf16_prefill_gemm() {
  const CpuFeatures& f = cpu_features();
  if (!f.amx_bf16 || !f.avx512_bf16 || !f.avx512f || !f.avx512bw) return nullptr;
  return request_amx_permission() ? &kBf16Gemm : nullptr;
}

}  // namespace hearth::kernels::amx
