// NEON kernels for ARMv8.2 with the dot-product extension (compiled with +dotprod; only called
// when hwcaps report asimddp). The kernels are in neon-kernels.inc, shared with neon.cpp.
#include <arm_neon.h>

#include "base/half.h"
#include "kernels/cpu/arch/arm/arm-kernels.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::neon_dotprod {

namespace {
inline int32x4_t dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b) {
  return vdotq_s32(acc, a, b);
}
}  // namespace

#include "kernels/cpu/arch/arm/neon-kernels.inc"

}  // namespace hearth::kernels::neon_dotprod
