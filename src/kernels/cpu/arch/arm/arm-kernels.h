// The AArch64 kernels: one set per NEON level (namespaces neon and neon_dotprod), same names.
// The tables are built in arm-tables.cpp, compiled for baseline ARMv8-A.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel-table.h"

// Row dots (RowDot) and kernels that take their token tiles themselves (TileDot): the integer
// dots over tiles of up to 4 tokens, each block unpacked once a tile, and Q8_0 / Q6_K rows
// against f32 activations, dequantized in registers.
#define HEARTH_DECLARE_NEON_KERNELS                                                              \
  RowDot dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q4_k, dot_q5_k, dot_f32, dot_f16, dot_bf16, \
      dot_mxfp4;                                                                                 \
  TileDot dot_q4_0_tiles, dot_q5_0_tiles, dot_mxfp4_tiles, dot_q4_k_tiles, dot_q5_k_tiles,       \
      dot_q8_0_f32, dot_q6_k_f32;

namespace hearth::kernels::neon {
HEARTH_DECLARE_NEON_KERNELS
}
namespace hearth::kernels::neon_dotprod {
HEARTH_DECLARE_NEON_KERNELS
}

#undef HEARTH_DECLARE_NEON_KERNELS
