// Quantizer tests: hand-checked blocks (expected bytes computed independently from ggml's
// published reference algorithm in float32), API errors, and per-type round-trip error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quant-blocks.h"
#include "kernels/quantize.h"
#include "tensor/dtype.h"

namespace hearth {
namespace {

// clang-format off
const float kBlocks[4][32] = {
{-0.578125f, -6.125f, 1.6875f, 9.890625f, -9.40625f, -8.625f, 6.203125f, -7.9375f, 0.75f, 7.703125f, -9.09375f, 5.296875f, -4.078125f, -9.75f, -8.1875f, 2.9375f, 2.4375f, -8.703125f, -3.25f, -8.046875f, 6.6875f, 2.640625f, -9.046875f, 7.15625f, -6.984375f, -3.796875f, 9.234375f, 9.125f, 7.703125f, -8.96875f, 7.515625f, 7.796875f},
{1.75f, -9.359375f, -3.875f, -9.453125f, 6.875f, -6.6875f, -1.671875f, 2.46875f, -6.328125f, 6.359375f, -7.171875f, 7.328125f, -1.078125f, 6.984375f, 10.875f, -5.15625f, -7.640625f, 7.671875f, 7.328125f, 9.5f, -4.9375f, 0.96875f, -7.828125f, 6.578125f, -8.9375f, 7.109375f, -9.03125f, 8.859375f, -4.359375f, 4.9375f, 10.828125f, 6.0625f},
{2.734375f, -0.890625f, 3.953125f, 7.796875f, 3.5625f, 0.625f, -1.359375f, -3.0f, -5.1875f, -3.140625f, -8.328125f, 7.4375f, -1.34375f, 5.859375f, 4.890625f, 0.046875f, 3.421875f, -1.734375f, 8.546875f, -8.609375f, -7.171875f, 5.4375f, 2.4375f, -5.671875f, 0.0f, -6.078125f, 4.703125f, 2.546875f, -9.6875f, 10.4375f, -8.46875f, 6.90625f},
{-2.0f, -1.875f, -1.75f, -1.625f, -1.5f, -1.375f, -1.25f, -1.125f, -1.0f, -0.875f, -0.75f, -0.625f, -0.5f, -0.375f, -0.25f, -0.125f, 0.0f, 0.125f, 0.25f, 0.375f, 0.5f, 0.625f, 0.75f, 0.875f, 1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f},
};
struct Expected { DType type; const char* hex[4]; };
const Expected kExpected[] = {
  {DType::Q8_0, {"fc2cf9b1167f8791509a0a638b44cc8397261f90d69956228c5ca6cf7775638d6164",
                 "7b2d1493d39250b2ec1db64aac56f3527fc4a75a566fc60ba54d98539767cd3a7e47",
                 "432d21f5305f2b08efdbc1da9b5af0473c012aeb6897a9421ebb00b6391f8a7f9954",
                 "082481899199a1a9b1b9c0c8d0d8e0e8f0f8000810182028303840474f575f676f77"}},
  {DType::Q4_0, {"f2bc68fdb7f03f6ff32ee7b21f142bff2f26", "70bde72f3b1fc37de936fd33fd13b943004c",
                 "38bd569915f2d54869ca8cda4e62f904e438", "0034809191a2a2b3b3c4c4d5d5e6e6f7f7f8"}},
  {DType::Q4_1, {"3d3de0c89713591fd0911cd1285de1ebd410d1da", "6c3dbac818d0c4e03c8216c902cc02ec46bcffb3",
                 "5e3dd8c8a967ea1d2ab896357335b19d06fc1bc7", "223400c080809191a2a2b3b3c4c4d5d5e6e6f7f7"}},
  {DType::Q5_0, {"f2b8b3744e23c1ea5dd05fcef64dbf641f1747ff4d3b", "70b96e955115bd5e562e76fac26cd967db3562960078",
                 "38b9c2979a53bc313ad4bb8fc29508959dc5f207d950", "00300000ffff00112233445566778899aabbccddeeff"}},
  {DType::Q5_1, {"1239e0c84c8bb1dc3e26a23fa14219b3419ce1e8c910b2c4", "3f39bac8916aaeea31a0a9d079042c82159813ca8d69ff87",
                 "3239d8c83d6865ac43cec52b44703d6af76a623a0df826af", "003000c00000ffff00112233445566778899aabbccddeeff"}},
};
// clang-format on

std::string hex(const std::vector<uint8_t>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t v : b) {
    s += digits[v >> 4];
    s += digits[v & 15];
  }
  return s;
}

TEST(Quantize, HandCheckedBlocksMatchGgmlAlgorithm) {
  for (const Expected& e : kExpected) {
    for (int b = 0; b < 4; ++b) {
      std::vector<uint8_t> out(dtype_info(e.type).block_bytes);
      ASSERT_TRUE(kernels::quantize_row(e.type, kBlocks[b], out.data(), 32).is_ok());
      EXPECT_EQ(hex(out), e.hex[b]) << dtype_name(e.type) << " block " << b;
    }
  }
}

TEST(Quantize, AllZeroBlocksQuantizeToZero) {
  const std::vector<float> zeros(256, 0.f);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    std::vector<uint8_t> out(*row_bytes(t, 256), 0xAB);
    ASSERT_TRUE(kernels::quantize_row(t, zeros.data(), out.data(), 256).is_ok());
    std::vector<float> back(256, 1.f);
    kernels::dequantize_row(t, out.data(), back.data(), 256);
    for (float v : back) ASSERT_EQ(v, 0.f) << dtype_name(t);
  }
}

// MXFP4 by hand (llama.cpp's block_mxfp4): e is floor(log2 amax) - 2 + 127, codes are E2M1
// (sign in bit 3), low nibbles hold elements 0..15 and high nibbles 16..31; values on the grid
// come back exactly, between two grid points they go to the smaller magnitude, and beyond 6x the
// block scale they saturate.
TEST(Quantize, Mxfp4LayoutScaleAndRounding) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(kernels::kMxfp4Values[j % 16]) * 4.0f;
  x[16] = 1.0f;  // element 16 (high nibble of byte 0): 1 / 4 = 0.25 units, rounds to 0
  kernels::BlockMxfp4 b;
  ASSERT_TRUE(kernels::quantize_row(DType::MXFP4, x.data(), &b, 32).is_ok());
  EXPECT_EQ(b.e, 130);  // amax 48: floor(log2 48) = 5, 5 - 2 + 127; scale 2^(130 - 128) = 4
  EXPECT_EQ(b.qs[0], 0x00);
  EXPECT_EQ(b.qs[1], 0x11);   // elements 1 and 17: +0.5 x 8
  EXPECT_EQ(b.qs[7], 0x77);   // +6 x 8 = 48
  EXPECT_EQ(b.qs[8], 0x00);   // -0 is written as +0
  EXPECT_EQ(b.qs[15], 0xFF);  // -6 x 8
  std::vector<float> back(32);
  kernels::dequantize_row(DType::MXFP4, &b, back.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(back[size_t(j)], j == 16 ? 0.0f : x[size_t(j)]) << j;
  // Ties and saturation, at scale 1 (amax 15 -> e = 3 - 2 + 127 = 128).
  const float in[32] = {15.0f, 2.5f, 5.0f, -5.0f, 10.0f, 0.49f, -0.51f, 7.0f};
  ASSERT_TRUE(kernels::quantize_row(DType::MXFP4, in, &b, 32).is_ok());
  EXPECT_EQ(b.e, 128);
  kernels::dequantize_row(DType::MXFP4, &b, back.data(), 32);
  const float want[8] = {12.0f, 2.0f, 4.0f, -4.0f, 8.0f, 0.0f, -1.0f, 6.0f};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(back[size_t(j)], want[j]) << j;
  // The E8M0 half-scale is exact down to e = 0 (subnormal 2^-128).
  EXPECT_EQ(kernels::mxfp4_scale(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(kernels::mxfp4_scale(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(kernels::mxfp4_scale(255), std::ldexp(1.0f, 127));
  // A block of tiny values takes the smallest scale (e = 0) and keeps what it can represent.
  float tiny[32] = {std::ldexp(1.0f, -126), std::ldexp(-3.0f, -128)};
  ASSERT_TRUE(kernels::quantize_row(DType::MXFP4, tiny, &b, 32).is_ok());
  EXPECT_EQ(b.e, 0);
  kernels::dequantize_row(DType::MXFP4, &b, back.data(), 32);
  EXPECT_EQ(back[0], std::ldexp(1.0f, -126));
  EXPECT_EQ(back[1], std::ldexp(-3.0f, -128));
  EXPECT_EQ(back[2], 0.0f);
}

TEST(Quantize, RejectsBadLengthsAndTypes) {
  std::vector<float> x(300, 1.f);
  std::vector<uint8_t> out(1024);
  auto s = kernels::quantize_row(DType::Q4_K, x.data(), out.data(), 300);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("multiple"), std::string::npos) << s.message();
  EXPECT_FALSE(kernels::quantize_row(DType::Q8_0, x.data(), out.data(), 33).is_ok());
  EXPECT_FALSE(kernels::quantize_row(DType::I32, x.data(), out.data(), 32).is_ok());
  EXPECT_FALSE(kernels::quantize_rows(DType::Q8_0, x.data(), out.data(), -1, 32).is_ok());
  EXPECT_FALSE(kernels::can_quantize(DType::Q2_K));
  EXPECT_TRUE(kernels::can_quantize(DType::Q6_K));
}

TEST(Quantize, RowsMatchSingleRowsWithAndWithoutPool) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 7, n = 512;
  std::vector<float> x(size_t(rows * n));
  for (float& v : x) v = nd(rng);
  ThreadPool pool(2);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16}) {
    const uint64_t rb = *row_bytes(t, n);
    std::vector<uint8_t> a(rb * rows), b(rb * rows), one(rb);
    auto ra = kernels::quantize_rows(t, x.data(), a.data(), rows, n, &pool);
    auto rb2 = kernels::quantize_rows(t, x.data(), b.data(), rows, n);
    ASSERT_TRUE(ra.is_ok() && rb2.is_ok());
    EXPECT_EQ(*ra, rb * rows);
    EXPECT_EQ(a, b) << dtype_name(t);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(kernels::quantize_row(t, x.data() + r * n, one.data(), n).is_ok());
      EXPECT_TRUE(std::equal(one.begin(), one.end(), a.begin() + int64_t(rb) * r)) << dtype_name(t);
    }
  }
}

// Round trip error, relative to the block's scale: each type's worst case follows from its
// number of levels (half a step) plus the fp16 rounding of its scales.
TEST(Quantize, RoundTripErrorWithinHalfAStep) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t n = 2048;
  std::vector<float> x(n), back(n);
  for (float& v : x) v = nd(rng) * (1 + 3 * (rng() % 4));
  struct Case {
    DType t;
    int block;
    double steps;
  };
  for (Case c :
       {Case{DType::Q8_0, 32, 127}, Case{DType::Q4_0, 32, 8}, Case{DType::Q4_1, 32, 7.5},
        Case{DType::Q5_0, 32, 16}, Case{DType::Q5_1, 32, 15.5}, Case{DType::Q4_K, 256, 3.0},
        Case{DType::Q5_K, 256, 7.0}, Case{DType::Q6_K, 256, 15.0}}) {
    std::vector<uint8_t> q(*row_bytes(c.t, n));
    ASSERT_TRUE(kernels::quantize_row(c.t, x.data(), q.data(), n).is_ok());
    kernels::dequantize_row(c.t, q.data(), back.data(), n);
    for (int64_t b = 0; b < n; b += c.block) {
      float amax = 0;
      for (int j = 0; j < c.block; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      // Half a step, plus the fp16 rounding of the scale seen at the top level (steps * 2^-11).
      // Q4_0/Q5_0 map the signed max to -8/-16, so the opposite extreme clamps at +7/+15: a full
      // step there. K-quants share 6-bit (Q6_K: 8-bit) sub-block scales: a full step too.
      const bool full = c.block == 256 || c.t == DType::Q4_0 || c.t == DType::Q5_0;
      const double step = amax / c.steps;
      const double tol = step * ((full ? 1.0 : 0.5) + c.steps / 2048.0) + 1e-6;
      for (int j = 0; j < c.block; ++j)
        ASSERT_LE(std::fabs(back[b + j] - x[b + j]), tol) << dtype_name(c.t) << " at " << b + j;
    }
  }
}

}  // namespace
}  // namespace hearth
