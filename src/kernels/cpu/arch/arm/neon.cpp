// NEON kernels for baseline ARMv8-A (no sdot): int8 products widen through vmull_s8.
// The kernels themselves are in neon-kernels.inc, shared with neon-dotprod.cpp.
#include <arm_neon.h>

#include "base/half.h"
#include "kernels/cpu/arch/arm/arm-kernels.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::neon {

namespace {
inline int32x4_t dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}
}  // namespace

#include "kernels/cpu/arch/arm/neon-kernels.inc"

}  // namespace hearth::kernels::neon
