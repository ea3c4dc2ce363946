// The per-ISA kernel tables: for every runnable weight dtype, the activation type its dot
// product consumes, the dot kernel and the dequantizer. One table per ISA, picked once at
// start-up; adding an ISA = one table in cpu/arch/<arch>/ plus a line in its *-tables.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "base/cpu-features.h"
#include "base/thread-pool.h"
#include "tensor/dtype.h"
#include "tensor/tensor-view.h"

namespace hearth::kernels {

// Ordered: on one architecture a higher value is a strictly larger instruction set.
enum class Isa : int { kRef = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };
const char* isa_name(Isa isa);

// dot(weight row w of n elements, activation row x in the weight's act type) -> y.
// Kernels compute `n_tok` tokens per call: x rows are x_stride bytes apart, results go to
// y[t * y_stride]. Taking several tokens lets one weight row load serve a tile of tokens.
using VecDotFn = void (*)(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                          float* y, int64_t y_stride);
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeKernels {
  DType act_type = DType::F32;  // F32 = activations are used as they are
  VecDotFn dot = nullptr;       // nullptr: dtype not runnable
  DequantizeFn dequantize = nullptr;
};

inline constexpr int kMaxTypeId = 31;  // ggml ids 0..30 index the table

struct KernelTable {
  Isa isa = Isa::kRef;
  const char* name = "ref";
  TypeKernels types[kMaxTypeId] = {};
  const TypeKernels& of(DType t) const {
    static const TypeKernels none;
    return uint32_t(t) < uint32_t(kMaxTypeId) ? types[uint32_t(t)] : none;
  }
};

// The scalar reference table (ref/ref-table.cpp). Always supported.
const KernelTable& ref_kernel_table();

// Tables this build has for its architecture, best first, with what each needs
// (cpu/arch/x86/x86-tables.cpp or cpu/arch/arm/arm-tables.cpp; the ref table is not listed).
struct ArchTable {
  const KernelTable* table;
  bool (*supported)(const CpuFeatures&);
};
std::vector<ArchTable> arch_kernel_tables();

// Every table this machine can run, best first, ending with ref (tests run them all).
std::vector<const KernelTable*> supported_kernel_tables();

// The table picked once at start-up: the best supported one, capped by HEARTH_ISA.
const KernelTable& active_kernel_table();

// The matmul driver (ops.h's matmul) over an explicit table, so tests can run every ISA.
// W {d, n} @ X [T, n] f32 -> Y [T, d] f32.
void matmul_with_table(const KernelTable& table, const TensorView& w, const float* x,
                       int64_t n_tokens, float* y, ThreadPool& pool);

// Runs table.dot over a token tile with a single-token kernel: for ISAs whose multi-token
// kernel is not specialised. Declared here so tables can share it.
template <float (*Dot)(int64_t, const void*, const void*)>
void dot_each_token(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int t = 0; t < n_tok; ++t) y[t * y_stride] = Dot(n, w, xb + uint64_t(t) * x_stride);
}

}  // namespace hearth::kernels
