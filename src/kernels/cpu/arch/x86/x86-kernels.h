// The x86 kernels each ISA file exports. The tables are built in x86-tables.cpp, compiled for
// baseline x86-64, so building them never executes an instruction the CPU may lack.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel-table.h"

namespace hearth::kernels::avx2 {

RowDot dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q4_k, dot_q5_k, dot_mxfp4;
// The same dots over tiles of up to 4 tokens, each weight block unpacked once a tile.
TileDot dot_q4_0_tiles, dot_q5_0_tiles, dot_mxfp4_tiles, dot_q4_k_tiles, dot_q5_k_tiles;
RowDot dot_f32, dot_f16, dot_bf16;
RowDequantize dequantize_q4_0, dequantize_q8_0, dequantize_mxfp4, dequantize_f16, dequantize_bf16;
// Q6_K and Q8_0 rows against f32 activations, dequantized in registers (token tiles).
TileDot dot_q6_k_f32, dot_q8_0_f32;
// Row-interleaved Q6_K and Q8_0 against int16 activations, Q4_0, Q4_K, Q5_K and MXFP4 against
// Q8_0 ones (avx2-packed.cpp).
extern const PackedLayout q6_k_packed, q8_0_packed, q4_0_packed, q4_k_packed, q5_k_packed,
    mxfp4_packed;

}  // namespace hearth::kernels::avx2

// AVX2 + AVX-VNNI: the AVX2 packed layouts on `vpdpbusd` / `vpdpwssd` (avx-vnni-packed.cpp);
// everything else is the AVX2 table's.
namespace hearth::kernels::avx_vnni {

extern const PackedLayout q6_k_packed, q8_0_packed, q4_0_packed, q4_k_packed, q5_k_packed,
    mxfp4_packed;

}  // namespace hearth::kernels::avx_vnni

// AVX-512 (F/BW/VL/DQ + VNNI) specialisations; other types reuse the AVX2 kernels.
namespace hearth::kernels::avx512 {

RowDot dot_q4_0, dot_mxfp4, dot_f32, dot_f16, dot_bf16;
RowDequantize dequantize_f16, dequantize_q8_0, dequantize_q6_k;
// Q6_K rows against f32 activations, dequantized in registers (token tiles).
TileDot dot_q6_k_f32;

// Row-interleaved layouts (avx512-packed.cpp).
extern const PackedLayout q4_0_packed;
extern const PackedLayout mxfp4_packed;
extern const PackedLayout q8_0_packed;
extern const PackedLayout q4_k_packed;  // avx512-packed-q4k.cpp
extern const PackedLayout q5_k_packed;  // avx512-packed-q4k.cpp
extern const PackedLayout q6_k_packed;  // avx512-packed-q6k.cpp
extern const PackedLayout f16_packed;

}  // namespace hearth::kernels::avx512
