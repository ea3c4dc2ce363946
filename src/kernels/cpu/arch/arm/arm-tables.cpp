// The AArch64 kernel tables, best first: NEON with sdot, then baseline NEON (every AArch64 CPU).
// Adding a level (i8mm, SVE): its kernel file and one table here. Q8_0 and Q6_K take f32
// activations (kernel-table.h dot_via_dequantize says why), dequantized in registers.
#include "kernels/cpu/arch/arm/arm-kernels.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels {

namespace {

#define HEARTH_NEON_TABLE(ns, table_name)                                              \
  KernelTable make_##ns##_table() {                                                    \
    KernelTable t;                                                                     \
    t.isa = Isa::kNeon;                                                                \
    t.name = table_name;                                                               \
    auto set = [&](DType w, DType act, VecDotFn dot, DequantizeFn dq) {                \
      t.types[uint32_t(w)] = TypeKernels{act, dot, dq};                                \
    };                                                                                 \
    set(DType::F32, DType::F32, dot_each_token<ns::dot_f32>, ref::dequantize_f32);     \
    set(DType::F16, DType::F32, dot_each_token<ns::dot_f16>, ref::dequantize_f16);     \
    set(DType::BF16, DType::F32, dot_each_token<ns::dot_bf16>, ref::dequantize_bf16);  \
    set(DType::Q4_0, DType::Q8_0, ns::dot_q4_0_tiles, ref::dequantize_q4_0);           \
    set(DType::Q4_1, DType::Q8_1, dot_each_token<ns::dot_q4_1>, ref::dequantize_q4_1); \
    set(DType::Q5_0, DType::Q8_0, ns::dot_q5_0_tiles, ref::dequantize_q5_0);           \
    set(DType::Q5_1, DType::Q8_1, dot_each_token<ns::dot_q5_1>, ref::dequantize_q5_1); \
    set(DType::Q8_0, DType::F32, ns::dot_q8_0_f32, ref::dequantize_q8_0);              \
    set(DType::Q4_K, DType::Q8_K, ns::dot_q4_k_tiles, ref::dequantize_q4_k);           \
    set(DType::Q5_K, DType::Q8_K, ns::dot_q5_k_tiles, ref::dequantize_q5_k);           \
    set(DType::Q6_K, DType::F32, ns::dot_q6_k_f32, ref::dequantize_q6_k);              \
    set(DType::MXFP4, DType::Q8_0, ns::dot_mxfp4_tiles, ref::dequantize_mxfp4);        \
    return t;                                                                          \
  }

HEARTH_NEON_TABLE(neon_dotprod, "neon-dotprod")
HEARTH_NEON_TABLE(neon, "neon")

}  // namespace

std::vector<ArchTable> arch_kernel_tables() {
  static const KernelTable dotprod_table = make_neon_dotprod_table();
  static const KernelTable neon_table = make_neon_table();
  return {
      {&dotprod_table, [](const CpuFeatures& f) { return f.neon && f.arm_dotprod; }},
      {&neon_table, [](const CpuFeatures& f) { return f.neon; }},
  };
}

}  // namespace hearth::kernels
