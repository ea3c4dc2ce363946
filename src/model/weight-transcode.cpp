#include "model/weight-transcode.h"

#include <cstring>

#include "kernels/quant-blocks.h"

namespace hearth {

using kernels::BlockQ3_K;
using kernels::BlockQ6_K;
using kernels::kQKK;

std::optional<DType> transcode_target(DType t) {
  if (t == DType::Q3_K) return DType::Q6_K;
  return std::nullopt;
}

void transcode(DType from, const void* src, void* dst, int64_t n_blocks) {
  if (from == DType::Q3_K) transcode_q3_k_to_q6_k(src, dst, n_blocks);
}

// Element e = 128 n + 32 k + l of either block: Q3_K's sub-block 8 n + 2 k + l / 16 is Q6_K's,
// and Q6_K keeps the code + 32 as 4 low bits in ql[64 n + l + 32 (k & 1)] (the high nibble for
// k >= 2) and 2 high bits at bit 2 k of qh[32 n + l].
void transcode_q3_k_to_q6_k(const void* src, void* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ3_K*>(src);
  auto* out = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const BlockQ3_K& a = in[i];
    BlockQ6_K b{};
    b.d = a.d;
    for (int j = 0; j < kQKK / 16; ++j) b.scales[j] = int8_t(kernels::q3_k_scale(a.scales, j) - 32);
    // q3_k_code(a, e) + 32 for e = 128 n + 32 k + l, a row of 32 bytes at a time (vectorisable:
    // a 7B Q3_K_M file has ~25 million blocks).
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 32; ++l) {
          const int low = (a.qs[32 * n + l] >> (2 * k)) & 3;
          const int high = (a.hmask[l] >> (4 * n + k)) & 1;
          const int q = low + 28 + 4 * high;  // code + 32: 28..35
          b.ql[64 * n + l + 32 * (k & 1)] |= uint8_t((q & 0xF) << (k >= 2 ? 4 : 0));
          b.qh[32 * n + l] |= uint8_t((q >> 4) << (2 * k));
        }
    std::memcpy(&out[i], &b, sizeof b);
  }
}

}  // namespace hearth
