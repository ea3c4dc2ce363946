// The AArch64 kernels: one set per NEON level (namespaces neon and neon_dotprod), same names.
// The tables are built in arm-tables.cpp, compiled for baseline ARMv8-A.
#pragma once

#include <cstdint>

#define HEARTH_DECLARE_NEON_KERNELS                                                           \
  float dot_q4_0(int64_t n, const void* w, const void* x);                                    \
  float dot_q4_1(int64_t n, const void* w, const void* x);                                    \
  float dot_q5_0(int64_t n, const void* w, const void* x);                                    \
  float dot_q5_1(int64_t n, const void* w, const void* x);                                    \
  float dot_q4_k(int64_t n, const void* w, const void* x);                                    \
  float dot_q5_k(int64_t n, const void* w, const void* x);                                    \
  float dot_f32(int64_t n, const void* w, const void* x);                                     \
  float dot_f16(int64_t n, const void* w, const void* x);                                     \
  float dot_bf16(int64_t n, const void* w, const void* x);                                    \
  float dot_mxfp4(int64_t n, const void* w, const void* x);                                   \
  /* The integer dots over tiles of up to 4 tokens (VecDotFn), each block unpacked once */    \
  void dot_q4_0_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,  \
                      float* y, int64_t y_stride);                                            \
  void dot_q5_0_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,  \
                      float* y, int64_t y_stride);                                            \
  void dot_mxfp4_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, \
                       float* y, int64_t y_stride);                                           \
  void dot_q4_k_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,  \
                      float* y, int64_t y_stride);                                            \
  void dot_q5_k_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,  \
                      float* y, int64_t y_stride);                                            \
  /* Q8_0 / Q6_K rows against f32 activations, dequantized in registers (VecDotFn: tiles) */  \
  void dot_q8_0_f32(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,    \
                    float* y, int64_t y_stride);                                              \
  void dot_q6_k_f32(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,    \
                    float* y, int64_t y_stride);

namespace hearth::kernels::neon {
HEARTH_DECLARE_NEON_KERNELS
}
namespace hearth::kernels::neon_dotprod {
HEARTH_DECLARE_NEON_KERNELS
}

#undef HEARTH_DECLARE_NEON_KERNELS
