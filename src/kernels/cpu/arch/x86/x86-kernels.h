// The x86 kernels each ISA file exports. The tables are built in x86-tables.cpp, compiled for
// baseline x86-64, so building them never executes an instruction the CPU may lack.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel-table.h"

namespace hearth::kernels::avx2 {

float dot_q4_0(int64_t n, const void* w, const void* x);
float dot_q4_1(int64_t n, const void* w, const void* x);
float dot_q5_0(int64_t n, const void* w, const void* x);
float dot_q5_1(int64_t n, const void* w, const void* x);
float dot_q4_k(int64_t n, const void* w, const void* x);
float dot_q5_k(int64_t n, const void* w, const void* x);
float dot_f32(int64_t n, const void* w, const void* x);
float dot_f16(int64_t n, const void* w, const void* x);
float dot_bf16(int64_t n, const void* w, const void* x);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
float dot_mxfp4(int64_t n, const void* w, const void* x);
void dequantize_mxfp4(const void* src, float* dst, int64_t n);

}  // namespace hearth::kernels::avx2

// AVX-512 (F/BW/VL/DQ + VNNI) specialisations; other types reuse the AVX2 kernels.
namespace hearth::kernels::avx512 {

float dot_q4_0(int64_t n, const void* w, const void* x);
float dot_mxfp4(int64_t n, const void* w, const void* x);
float dot_f32(int64_t n, const void* w, const void* x);
float dot_f16(int64_t n, const void* w, const void* x);
float dot_bf16(int64_t n, const void* w, const void* x);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);

// Row-interleaved layouts (avx512-packed.cpp).
extern const PackedLayout q4_0_packed;
extern const PackedLayout q8_0_packed;
extern const PackedLayout q4_k_packed;
extern const PackedLayout f16_packed;

}  // namespace hearth::kernels::avx512
