// The scalar reference kernel table: every runnable dtype's ref dot and dequantizer.
// Adding a type: one line here (and its kernels in ref/quant-ref.h).
#include "kernels/cpu/kernel-table.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels {

namespace {

KernelTable make_ref_table() {
  KernelTable t;
  t.isa = Isa::kRef;
  t.name = "ref";
  auto set = [&](DType w, DType act, VecDotFn dot, DequantizeFn dq) {
    t.types[uint32_t(w)] = TypeKernels{act, dot, dq};
  };
  set(DType::F32, DType::F32, dot_each_token<ref::dot_f32>, ref::dequantize_f32);
  set(DType::F16, DType::F32, dot_each_token<ref::dot_f16>, ref::dequantize_f16);
  set(DType::BF16, DType::F32, dot_each_token<ref::dot_bf16>, ref::dequantize_bf16);
  set(DType::Q4_0, DType::Q8_0, dot_each_token<ref::dot_q4_0>, ref::dequantize_q4_0);
  set(DType::Q4_1, DType::Q8_1, dot_each_token<ref::dot_q4_1>, ref::dequantize_q4_1);
  set(DType::Q5_0, DType::Q8_0, dot_each_token<ref::dot_q5_0>, ref::dequantize_q5_0);
  set(DType::Q5_1, DType::Q8_1, dot_each_token<ref::dot_q5_1>, ref::dequantize_q5_1);
  // Q8_0 and Q6_K take f32 activations: 8-bit activations would double their error.
  set(DType::Q8_0, DType::F32, dot_via_dequantize<ref::dequantize_q8_0, ref::dot_f32, 32, 34>,
      ref::dequantize_q8_0);
  set(DType::Q4_K, DType::Q8_K, dot_each_token<ref::dot_q4_k>, ref::dequantize_q4_k);
  set(DType::Q5_K, DType::Q8_K, dot_each_token<ref::dot_q5_k>, ref::dequantize_q5_k);
  set(DType::Q6_K, DType::F32, dot_via_dequantize<ref::dequantize_q6_k, ref::dot_f32, 256, 210>,
      ref::dequantize_q6_k);
  set(DType::MXFP4, DType::Q8_0, dot_each_token<ref::dot_mxfp4>, ref::dequantize_mxfp4);
  return t;
}

}  // namespace

const KernelTable& ref_kernel_table() {
  static const KernelTable table = make_ref_table();
  return table;
}

}  // namespace hearth::kernels
