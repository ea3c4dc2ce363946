// Quantized block layouts, bit-compatible with ggml/GGUF (little-endian, no padding).
// Adding a type: declare its block here, static_assert its size, add its row to tensor/dtype.cpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace hearth::kernels {

// Elements per block for the legacy (32) and K-quant (256) families.
inline constexpr int kQK32 = 32;
inline constexpr int kQKK = 256;
// K-quant scale bytes: 8 sub-blocks x (6-bit scale + 6-bit min) packed into 12 bytes.
inline constexpr int kKScaleBytes = 12;

// fp16 fields are IEEE half bits (base/half.h converts them).

// x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK32];
};
// Activation block for Q4_1/Q5_1 dots: s = d * sum(qs) so the weight's min term costs one FMA.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK32];
};
// x = d * (q - 8); qs[j] holds element j (low nibble) and element j+16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK32 / 2];
};
// x = d * q + m, q in [0, 15]; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK32 / 2];
};
// x = d * (q - 16); low 4 bits as Q4_0, bit 4 of element j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
// x = d * q + m, q in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};

// 256 elements in 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in [0, 15].
// qs: for each 64-element half-pair, 32 bytes: low nibbles = sub-block 2k, high = 2k+1.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// As Q4_K with a fifth bit: qh[l] bit 2k (sub-block 2k) and 2k+1 (sub-block 2k+1) of element l.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 256 elements in 16 sub-blocks of 16: x = d * (s[j] - 32) * q, q in [-4, 3] as 2 low bits
// (qs) and a high bit (hmask, set: +0, clear: -4); s[j] 6 bits: low 4 in scales[0..7] (nibble
// j % 8, low for j < 8), high 2 in scales[8..11]. See ref/quantize-kquants.cpp for the order.
// No kernels compute it: the loader rewrites it as Q6_K, which holds its values exactly
// (model/weight-transcode.h).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
// Q3_K's 6-bit scale j (0..15), before its offset of 32.
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  return low | ((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}
// Q3_K's code of element e (0..255), in [-4, 3]: two low bits from qs, the high bit from hmask
// (clear: -4). Element e = 128 n + 32 j + l takes qs[32 n + l] >> 2 j, hmask[l] bit 4 n + j and
// scale 8 n + 2 j + l / 16.
inline int q3_k_code(const BlockQ3_K& b, int e) {
  const int n = e / 128, j = (e % 128) / 32, l = e % 32;
  const int low = (b.qs[32 * n + l] >> (2 * j)) & 3;
  return low - ((b.hmask[l] >> (4 * n + j)) & 1 ? 0 : 4);
}
// 256 elements in 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in [0, 63] split into
// 4 low bits (ql) and 2 high bits (qh); see ref/quantize-kquants.cpp for the interleave.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// The 256 codes q (0..63) of a Q6_K block in element order (ref::dequantize_q6_k's reading):
// what the packed Q6_K layouts rearrange.
inline void q6_k_codes(const BlockQ6_K& b, uint8_t (&c)[kQKK]) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* ql = b.ql + 64 * h;
      const int qh = b.qh[32 * h + l];
      uint8_t* o = c + 128 * h + l;
      o[0] = uint8_t((ql[l] & 0xF) | (qh & 3) << 4);
      o[32] = uint8_t((ql[l + 32] & 0xF) | (qh >> 2 & 3) << 4);
      o[64] = uint8_t((ql[l] >> 4) | (qh >> 4 & 3) << 4);
      o[96] = uint8_t((ql[l + 32] >> 4) | (qh >> 6 & 3) << 4);
    }
}
// Activation block for K-quant dots: f32 scale, and sums of each 16 qs for the min terms.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// MXFP4 (OCP Microscaling FP4; llama.cpp's block_mxfp4, GGML type 39): 32 FP4 E2M1 codes that
// share one E8M0 scale byte e. x = kMxfp4Values[q] * 2^(e - 128): the table holds twice the
// E2M1 value (so the codes are small integers for int8 dots) and the scale is half of E8M0's
// 2^(e - 127). Nibbles as Q4_0: qs[j] low = element j, high = element j + 16; a code's high bit
// is its sign.
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQK32 / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) exactly, including e < 2 where it is a subnormal float.
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Unpacks the 6-bit scale and min of sub-block j (0..7) from a Q4_K/Q5_K scales[12].
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// All eight at once, four bytes a 32-bit word (the same values as kquant_scale_min for
// j = 0..7, without its branch per sub-block: row kernels unpack them for every block).
inline void kquant_scales_mins(const uint8_t* q, uint8_t (&sc)[8], uint8_t (&m)[8]) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint32_t six = 0x3F3F3F3Fu, low = 0x0F0F0F0Fu, top = 0x30303030u;
  const uint32_t out_sc[2] = {w[0] & six, (w[2] & low) | ((w[0] >> 2) & top)};
  const uint32_t out_m[2] = {w[1] & six, ((w[2] >> 4) & low) | ((w[1] >> 2) & top)};
  std::memcpy(sc, out_sc, 8);
  std::memcpy(m, out_m, 8);
}

}  // namespace hearth::kernels
