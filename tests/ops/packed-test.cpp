// Packed weight layouts (kernels/ops.h pack_weight / matmul_packed) against the unpacked matmul
// of the same table: same activations, so only summation order may differ. Token counts cover
// the kernel's token tiles and their tails; shapes without a layout must report none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "base/half.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quant-blocks.h"
#include "kernels/quantize.h"
#include "kernels/ref/quant-ref.h"

namespace hearth {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

std::vector<uint8_t> random_matrix(DType t, int64_t d, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 0.1f);
  std::vector<float> wf(size_t(d * n));
  for (float& v : wf) v = nd(rng);
  std::vector<uint8_t> q(*row_bytes(t, uint64_t(n)) * uint64_t(d));
  EXPECT_TRUE(kernels::quantize_rows(t, wf.data(), q.data(), d, n).is_ok());
  return q;
}

// What a layout computes, in float64: the dequantized source rows against the activations as
// the layout sees them (rounded like its act_type when it quantizes, else as given).
std::vector<double> packed_reference(const kernels::PackedLayout& l, const TensorView& w,
                                     const std::vector<float>& x, int64_t T) {
  const int64_t d = w.rows(), n = w.cols();
  std::vector<float> xs = x;
  if (l.quantize && l.act_type == DType::I16) {
    std::vector<int16_t> q(static_cast<size_t>(n));
    std::vector<float> d(static_cast<size_t>(n / 32));
    for (int64_t t = 0; t < T; ++t) {
      kernels::ref::quantize_i16_blocks(x.data() + t * n, q.data(), d.data(), n,
                                        l.act_split_i16 ? kernels::kSplitI16CodeMax : 32767);
      for (int64_t i = 0; i < n; ++i)
        xs[size_t(t * n + i)] = float(q[size_t(i)]) * d[size_t(i / 32)];
    }
  } else if (l.quantize) {
    const DType act = l.act_type;
    std::vector<uint8_t> qb(*row_bytes(act, uint64_t(n)));
    for (int64_t t = 0; t < T; ++t) {
      if (act == DType::Q8_K) {
        kernels::ref::quantize_q8_k(x.data() + t * n, qb.data(), n);
        kernels::ref::dequantize_q8_k(qb.data(), xs.data() + t * n, n);
      } else {
        kernels::ref::quantize_q8_0(x.data() + t * n, qb.data(), n);
        kernels::ref::dequantize_q8_0(qb.data(), xs.data() + t * n, n);
      }
    }
  }
  std::vector<float> wr(static_cast<size_t>(n));
  std::vector<double> y(size_t(T * d));
  for (int64_t r = 0; r < d; ++r) {
    kernels::dequantize_row(w.dtype, w.row(r), wr.data(), n);
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += double(wr[size_t(i)]) * xs[size_t(t * n + i)];
      y[size_t(t * d + r)] = acc;
    }
  }
  return y;
}

// Every layout against its float64 reference, and against the unpacked matmul of the same table
// when both round the activations alike (Q4_0: Q8_0; Q4_K: Q8_K; F16 and Q8_0: f32). Token
// counts 1..20 cover every token tile and its tail; outputs are poisoned and guarded.
TEST(Packed, MatchesReferenceAndUnpackedMatmul) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  int packed_types = 0;
  for (DType t : kTypes) {
    const kernels::PackedLayout* l = kernels::active_kernel_table().of(t).packed;
    const DType act = kernels::active_kernel_table().of(t).act_type;
    const bool same_act = l && act == l->act_type;
    // Odd counts of groups, block pairs and super-blocks; {48, 66} only F16 can pack.
    for (auto [d, n] : {std::pair<int64_t, int64_t>{32, 256},
                        {48, 512},
                        {160, 1024},
                        {16, 768},
                        {16, 1088},
                        {48, 66}}) {
      const auto bytes = kernels::packed_size(t, d, n);
      if (!bytes) continue;
      ++packed_types;
      const std::vector<uint8_t> wq = random_matrix(t, d, n, rng);
      TensorView w{"w", t, {d, n}, wq.data(), wq.size()};
      constexpr uint64_t kPad = 64;
      // 64-byte aligned packed buffer with guard bytes after it.
      std::vector<uint8_t> storage(*bytes + 64 + kPad, 0xA5);
      auto* packed = reinterpret_cast<uint8_t*>((uintptr_t(storage.data()) + 63) / 64 * 64);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        kernels::pack_weight(w, packed, pool);
        for (uint64_t g = 0; g < kPad; ++g) ASSERT_EQ(packed[*bytes + g], 0xA5) << "pack overran";
        for (int64_t T = 1; T <= 20; ++T) {
          if (threads == 2 && T > 8 && T % 4 != 3) continue;  // keep the suite fast
          std::vector<float> x(size_t(T * n));
          for (float& v : x) v = nd(rng);
          std::vector<float> got(size_t(T * d + 16), -777.f);
          kernels::matmul_packed(t, packed, d, n, x.data(), T, got.data(), pool);
          const std::vector<double> ref = packed_reference(*l, w, x, T);
          std::vector<float> unpacked(size_t(T * d));
          if (same_act) kernels::matmul(w, x.data(), T, unpacked.data(), pool);
          for (int64_t i = 0; i < T * d; ++i) {
            const float tol =
                2e-5f * (std::fabs(float(ref[size_t(i)])) + 1.f) * std::sqrt(float(n));
            ASSERT_NEAR(got[size_t(i)], ref[size_t(i)], tol)
                << dtype_name(t) << " d=" << d << " n=" << n << " T=" << T << " i=" << i;
            if (same_act) {
              ASSERT_NEAR(got[size_t(i)], unpacked[size_t(i)], tol)
                  << dtype_name(t) << " vs unpacked, d=" << d << " n=" << n << " T=" << T;
            }
          }
          for (int g = 0; g < 16; ++g) ASSERT_EQ(got[size_t(T * d + g)], -777.f);
        }
      }
    }
  }
  const kernels::KernelTable& active = kernels::active_kernel_table();
  // On AVX-512 VNNI, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16 and MXFP4 have packed layouts: make sure
  // they were exercised.
  if (active.isa == kernels::Isa::kAvx512) {
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F16,
                    DType::MXFP4})
      EXPECT_TRUE(kernels::packed_size(t, 32, 256))
          << "the avx512 table should pack " << dtype_name(t);
  }
  std::printf("  packed layouts on %s: %s (%d shapes tested)\n", active.name,
              kernels::packed_layouts_signature().c_str(), packed_types);
}

// HEARTH_ISA names a table this CPU runs (the avx2/ and avx-vnni/ runs of these tests set it):
// that table is the active one, so those runs test the layouts they say they test.
TEST(Packed, HearthIsaPicksTheTableItNames) {
  const char* want = std::getenv("HEARTH_ISA");
  if (!want || !*want) GTEST_SKIP() << "HEARTH_ISA not set: the best table is active";
  bool supported = false;
  for (const kernels::KernelTable* t : kernels::supported_kernel_tables())
    supported = supported || std::string_view(t->name) == want;
  if (!supported) GTEST_SKIP() << "this CPU has no " << want << " table";
  EXPECT_STREQ(kernels::active_kernel_table().name, want);
}

// The AVX-VNNI table runs AVX2's packed layouts with `vpdpbusd` / `vpdpwssd` in place of
// `vpmaddubsw` + `vpmaddwd`: every integer sum is exact either way, so the packed bytes, the
// activation codes and every output must be the AVX2 table's bits, at each token tile size.
TEST(Packed, AvxVnniLayoutsGiveTheAvx2TablesBits) {
  const kernels::KernelTable *vnni = nullptr, *avx2 = nullptr;
  for (const kernels::KernelTable* t : kernels::supported_kernel_tables()) {
    if (std::string_view(t->name) == "avx-vnni") vnni = t;
    if (std::string_view(t->name) == "avx2") avx2 = t;
  }
  if (!vnni || !avx2) GTEST_SKIP() << "this CPU has no AVX-VNNI (or no AVX2)";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  int compared = 0;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    const kernels::PackedLayout *a = avx2->of(t).packed, *b = vnni->of(t).packed;
    ASSERT_TRUE(a && b) << dtype_name(t);
    ASSERT_NE(a, b) << dtype_name(t) << ": the VNNI table should have its own kernels";
    constexpr int64_t d = 48, n = 768;
    ASSERT_TRUE(a->can_pack(d, n) && b->can_pack(d, n));
    ASSERT_EQ(a->bytes(d, n), b->bytes(d, n));
    const std::vector<uint8_t> wq = random_matrix(t, d, n, rng);
    const int64_t groups = d / a->group_rows;
    std::vector<uint8_t> pa(a->bytes(d, n) + 64), pb(pa.size());
    auto* wa = reinterpret_cast<uint8_t*>((uintptr_t(pa.data()) + 63) / 64 * 64);
    auto* wb = reinterpret_cast<uint8_t*>((uintptr_t(pb.data()) + 63) / 64 * 64);
    a->pack(wq.data(), wa, 0, groups, n);
    b->pack(wq.data(), wb, 0, groups, n);
    ASSERT_EQ(std::memcmp(wa, wb, a->bytes(d, n)), 0) << dtype_name(t) << ": packed bytes";
    for (int64_t T = 1; T <= 9; ++T) {
      std::vector<float> x(size_t(T * n));
      for (float& v : x) v = nd(rng);
      struct Act {
        std::vector<int8_t> q;
        std::vector<float> d;
        std::vector<int32_t> s;
      } act[2];
      const kernels::PackedLayout* l[2] = {a, b};
      std::vector<float> y[2];
      for (int k = 0; k < 2; ++k) {
        act[k].q.assign(size_t(T * kernels::kMaxActCodeBytes * n), 0);
        act[k].d.assign(size_t(T * n / 32), 0.f);
        act[k].s.assign(size_t(T * kernels::kActSumsPer32 * n / 32), 0);
        for (int64_t i = 0; i < T; ++i)
          l[k]->quantize(x.data() + i * n, n, act[k].q.data() + i * kernels::kMaxActCodeBytes * n,
                         act[k].d.data() + i * n / 32,
                         act[k].s.data() + i * kernels::kActSumsPer32 * n / 32);
        const kernels::PackedActivations pxa{act[k].q.data(), act[k].d.data(), act[k].s.data(), T,
                                             x.data()};
        y[k].assign(size_t(T * d), -777.f);
        l[k]->gemm(k == 0 ? wa : wb, 0, groups, n, pxa, y[k].data(), d);
      }
      ASSERT_EQ(act[0].q, act[1].q) << dtype_name(t);
      ASSERT_EQ(std::memcmp(act[0].d.data(), act[1].d.data(), act[0].d.size() * 4), 0);
      ASSERT_EQ(act[0].s, act[1].s) << dtype_name(t);
      for (size_t i = 0; i < y[0].size(); ++i) {
        ASSERT_NE(y[0][i], -777.f) << dtype_name(t) << " T=" << T << ": output " << i;
        ASSERT_EQ(std::memcmp(&y[0][i], &y[1][i], 4), 0)
            << dtype_name(t) << " T=" << T << " at " << i << ": " << y[0][i] << " vs " << y[1][i];
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 9);
}

// Packed bytes stay within a few % of the file's (the RSS budget counts the file's size).
// Q/K/V-style calls: several packed matrices of one input in one pass (mixed types, so mixed
// activation quantizers, and odd row counts) give exactly what one matmul_packed each gives,
// for decode token counts and for prompts long enough to take the prefill GEMM where it exists.
// Outputs are poisoned differently, so a group the hand-out skips fails; 3 and 8 threads over
// 13 groups make one-token calls steal (uneven shares, threads with one group or none).
TEST(Packed, SharedInputMatchesOneCallEach) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  constexpr int64_t n = 512;
  struct Mat {
    DType t;
    int64_t d;
    std::vector<uint8_t> storage;
    uint8_t* packed = nullptr;
  };
  std::vector<Mat> mats;
  for (auto [t, d] : {std::pair<DType, int64_t>{DType::Q4_0, 96},
                      {DType::Q8_0, 32},
                      {DType::Q4_K, 48},
                      {DType::Q5_K, 16},
                      {DType::Q6_K, 32},
                      {DType::F16, 16},
                      {DType::MXFP4, 32},
                      {DType::Q4_0, 16}}) {
    const auto bytes = kernels::packed_size(t, d, n);
    if (!bytes) continue;  // this ISA has no layout for it: the others still run shared
    Mat m{t, d, std::vector<uint8_t>(*bytes + 64), nullptr};
    m.packed = reinterpret_cast<uint8_t*>((uintptr_t(m.storage.data()) + 63) / 64 * 64);
    const std::vector<uint8_t> wq = random_matrix(t, d, n, rng);
    ThreadPool one(1);
    kernels::pack_weight(TensorView{"w", t, {d, n}, wq.data(), wq.size()}, m.packed, one);
    mats.push_back(std::move(m));
  }
  if (mats.empty()) {  // only right where the active table has no packed layouts at all
    EXPECT_EQ(kernels::packed_layouts_signature().find(':'), std::string::npos);
    return;
  }
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t T : {1, 2, 5, 40}) {
      std::vector<float> x(size_t(T * n));
      for (float& v : x) v = nd(rng);
      std::vector<std::vector<float>> shared, alone;
      std::vector<kernels::PackedMatmul> list;
      for (const Mat& m : mats) {
        shared.emplace_back(size_t(T * m.d), -777.f);
        alone.emplace_back(size_t(T * m.d), -555.f);
      }
      for (size_t i = 0; i < mats.size(); ++i)
        list.push_back({mats[i].t, mats[i].packed, mats[i].d, shared[i].data()});
      kernels::matmul_packed_shared(list, n, x.data(), T, pool);
      for (size_t i = 0; i < mats.size(); ++i) {
        kernels::matmul_packed(mats[i].t, mats[i].packed, mats[i].d, n, x.data(), T,
                               alone[i].data(), pool);
        for (size_t k = 0; k < alone[i].size(); ++k)
          ASSERT_EQ(shared[i][k], alone[i][k])
              << dtype_name(mats[i].t) << " matrix " << i << " T=" << T << " at " << k;
      }
    }
  }
}

TEST(Packed, PackedBytesStayNearTheFileSize) {
  const bool avx2 = kernels::active_kernel_table().isa == kernels::Isa::kAvx2;
  for (DType t : kTypes) {
    // The AVX2 Q6_K layout keeps its codes as bytes: 1.31x the file's bytes, for no bit
    // unpacking in a table without AVX-512's ternary logic (avx2-packed.cpp). Every other
    // layout stays within 3% of the file.
    const double bound = t == DType::Q6_K && avx2 ? 1.32 : 1.03;
    for (auto [d, n] : {std::pair<int64_t, int64_t>{2048, 5632}, {4096, 11008}, {32000, 4096}}) {
      const auto bytes = kernels::packed_size(t, d, n);
      if (!bytes) continue;
      const double file = double(*row_bytes(t, uint64_t(n))) * double(d);
      EXPECT_LE(double(*bytes), file* bound) << dtype_name(t) << " " << d << "x" << n;
    }
  }
}

// unpack_rows must give back exactly the dequantized source rows (prefill panels rely on it).
TEST(Packed, UnpackRowsGivesTheDequantizedSource) {
  std::mt19937 rng(5);
  int tested = 0;
  for (DType t : kTypes) {
    const kernels::PackedLayout* l = kernels::active_kernel_table().of(t).packed;
    constexpr int64_t d = 48, n = 512;
    const auto bytes = kernels::packed_size(t, d, n);
    if (!l || !bytes) continue;
    ASSERT_NE(l->unpack_rows, nullptr) << dtype_name(t) << ": every layout must unpack";
    ++tested;
    const std::vector<uint8_t> wq = random_matrix(t, d, n, rng);
    TensorView w{"w", t, {d, n}, wq.data(), wq.size()};
    std::vector<uint8_t> storage(*bytes + 64);
    auto* packed = reinterpret_cast<uint8_t*>((uintptr_t(storage.data()) + 63) / 64 * 64);
    ThreadPool pool(1);
    kernels::pack_weight(w, packed, pool);
    const int64_t rows = l->group_rows;
    std::vector<float> want(static_cast<size_t>(n)), got(size_t(rows * n), -777.f);
    for (int64_t g = 0; g < d / rows; ++g) {
      l->unpack_rows(packed, g, n, got.data());
      for (int64_t r = 0; r < rows; ++r) {
        kernels::dequantize_row(t, w.row(g * rows + r), want.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[size_t(r * n + i)], want[size_t(i)])
              << dtype_name(t) << " group " << g << " row " << r << " col " << i;
      }
    }
  }
  if (kernels::active_kernel_table().isa == kernels::Isa::kAvx512) {
    EXPECT_GT(tested, 0);
  }
}

// The layouts' activation quantizers must round exactly like the reference quantizer of their
// act_type. Q8_0: codes, fp16-rounded scales and 8 x each block's sum. Q8_K: codes, the scale
// with ref's sign (the first element of largest magnitude), and each 32-sum split in high byte
// and low 7 bits (see PackedActivations).
void expect_q8_0_bits(const kernels::PackedLayout& l, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size()), nb = n / 32;
  std::vector<kernels::BlockQ8_0> want(static_cast<size_t>(nb));
  kernels::ref::quantize_q8_0(x.data(), want.data(), n);
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> d(static_cast<size_t>(nb));
  std::vector<int32_t> s(static_cast<size_t>(nb));
  l.quantize(x.data(), n, q.data(), d.data(), s.data());
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(q[size_t(b * 32 + j)], want[size_t(b)].qs[j]) << "block " << b;
      sum += want[size_t(b)].qs[j];
    }
    EXPECT_EQ(d[size_t(b)], fp16_to_f32(want[size_t(b)].d)) << "block " << b;
    EXPECT_EQ(s[size_t(b)], 8 * sum) << "block " << b;
  }
}

void expect_q8_k_bits(const kernels::PackedLayout& l, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size()), nsb = n / 256;
  std::vector<kernels::BlockQ8_K> want(static_cast<size_t>(nsb));
  kernels::ref::quantize_q8_k(x.data(), want.data(), n);
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> d(static_cast<size_t>(n / 32));
  std::vector<int32_t> s(static_cast<size_t>(n / 32), -1);
  l.quantize(x.data(), n, q.data(), d.data(), s.data());
  for (int64_t b = 0; b < nsb; ++b) {
    const kernels::BlockQ8_K& w = want[size_t(b)];
    for (int j = 0; j < 256; ++j) ASSERT_EQ(q[size_t(b * 256 + j)], w.qs[j]) << "super-block " << b;
    EXPECT_EQ(d[size_t(b)], w.d) << "super-block " << b;
    const auto* bytes = reinterpret_cast<const uint8_t*>(&s[size_t(b * 8)]);
    for (int j = 0; j < 8; ++j) {
      const int sum = w.bsums[2 * j] + w.bsums[2 * j + 1];
      EXPECT_EQ(int(int8_t(bytes[j])) * 128 + int(bytes[8 + j]), sum) << b << "/" << j;
      EXPECT_LT(bytes[8 + j], 128) << "the low part must fit a signed byte";
    }
    for (int k = 4; k < 8; ++k) EXPECT_EQ(s[size_t(b * 8 + k)], 0);
  }
}

// I16: codes and scales exactly as ref::quantize_i16_blocks (2n bytes of codes a token). Split
// I16: the same at kSplitI16CodeMax, each code as its low then high signed byte, n bytes
// apart, and -32 x each 16 codes' sum.
void expect_i16_bits(const kernels::PackedLayout& l, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size()), nb = n / 32;
  const int32_t max_code = l.act_split_i16 ? kernels::kSplitI16CodeMax : 32767;
  std::vector<int16_t> want_q(static_cast<size_t>(n));
  std::vector<float> want_d(static_cast<size_t>(nb));
  kernels::ref::quantize_i16_blocks(x.data(), want_q.data(), want_d.data(), n, max_code);
  std::vector<int16_t> q(static_cast<size_t>(n), 0x5A5A);
  std::vector<float> d(static_cast<size_t>(nb));
  std::vector<int32_t> s(static_cast<size_t>(kernels::kActSumsPer32 * nb), -1);
  auto* q8 = reinterpret_cast<int8_t*>(q.data());
  l.quantize(x.data(), n, q8, d.data(), s.data());
  for (int64_t b = 0; b < nb; ++b) {
    EXPECT_EQ(d[size_t(b)], want_d[size_t(b)]) << "block " << b;
    int32_t sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      const int32_t got = l.act_split_i16 ? 256 * q8[n + i] + q8[i] : q[size_t(i)];
      ASSERT_EQ(got, want_q[size_t(i)]) << "block " << b << " " << j;
      sum[j / 16] += want_q[size_t(i)];
      if (l.act_split_i16) {
        ASSERT_NE(q8[n + i], -128) << "the high byte stays in [-127, 127]";
      }
    }
    if (l.act_split_i16) {
      for (int h = 0; h < 2; ++h) EXPECT_EQ(s[size_t(2 * b + h)], -32 * sum[h]) << "block " << b;
    }
  }
}

void expect_quantizer_bits(const kernels::PackedLayout& l, const std::vector<float>& x) {
  if (l.act_type == DType::I16)
    expect_i16_bits(l, x);
  else if (l.act_type == DType::Q8_K)
    expect_q8_k_bits(l, x);
  else
    expect_q8_0_bits(l, x);
}

TEST(Packed, ActivationQuantizerMatchesReferenceBits) {
  int tested = 0;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (DType t : kTypes) {
    const kernels::PackedLayout* l = kernels::active_kernel_table().of(t).packed;
    if (!l || !l->quantize) continue;  // no layout, or one with f32 activations
    ++tested;
    SCOPED_TRACE(dtype_name(t));
    constexpr int64_t n = 1024;
    std::vector<float> x(n);
    for (float& v : x) v = nd(rng);
    // Ties: values that land exactly on k + 0.5 after scaling (amax 127 -> |d| = 1).
    for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j % 2 ? j : -j) + 0.5f;
    x[31] = 127.f;
    for (int j = 32; j < 64; ++j) x[size_t(j)] = 0.f;  // an all-zero 32-block
    // I16: amax 32767 -> d = 1, so these land exactly on k + 0.5 (ties go to the even code).
    for (int j = 64; j < 96; ++j) x[size_t(j)] = float(j % 2 ? j : -j) * 100.f + 0.5f;
    x[95] = 32767.f;
    // Q8_K: a negative largest element, and a tie in magnitude (the first one sets the sign).
    x[300] = -9.f;
    x[600] = 7.f;
    x[700] = -7.f;
    for (int j = 768; j < 1024; ++j) x[size_t(j)] = 0.f;  // an all-zero 256-block: d = 0
    expect_quantizer_bits(*l, x);
    // Large sums: every element of a super-block near its maximum, both signs.
    for (int j = 256; j < 512; ++j) x[size_t(j)] = 5.f;
    for (int j = 512; j < 768; ++j) x[size_t(j)] = -5.f + 0.001f * float(j % 7);
    expect_quantizer_bits(*l, x);
  }
  if (kernels::active_kernel_table().isa == kernels::Isa::kAvx512) {
    EXPECT_GT(tested, 0) << "the avx512 Q4_0 and Q4_K layouts quantize their activations";
  }
}

TEST(Packed, ShapesWithoutALayoutSayNone) {
  for (DType t : kTypes) {
    // Row counts that are not a multiple of any group, and empty shapes.
    EXPECT_FALSE(kernels::packed_size(t, 17, 256)) << dtype_name(t);
    EXPECT_FALSE(kernels::packed_size(t, 0, 256)) << dtype_name(t);
    EXPECT_FALSE(kernels::packed_size(t, 32, 0)) << dtype_name(t);
  }
  // The AVX-512 Q4_0 layout interleaves pairs of 32-blocks (an odd count has none); AVX2's
  // takes single blocks.
  const kernels::Isa isa = kernels::active_kernel_table().isa;
  if (isa == kernels::Isa::kAvx512) {
    EXPECT_FALSE(kernels::packed_size(DType::Q4_0, 32, 32));
  } else if (isa == kernels::Isa::kAvx2) {
    EXPECT_TRUE(kernels::packed_size(DType::Q4_0, 32, 32));
  }
}

}  // namespace
}  // namespace hearth
