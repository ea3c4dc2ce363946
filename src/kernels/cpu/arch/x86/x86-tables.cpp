// The x86-64 kernel tables, best first, with the CPU features each needs. Built here, in a
// baseline-compiled file; adding an x86 ISA level = its kernel file and one table here.
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels {

namespace {

void set(KernelTable& t, DType w, DType act, VecDotFn dot, DequantizeFn dq) {
  t.types[uint32_t(w)] = TypeKernels{act, dot, dq};
}

KernelTable make_avx2_table() {
  KernelTable t;
  t.isa = Isa::kAvx2;
  t.name = "avx2";
  set(t, DType::F32, DType::F32, dot_each_token<avx2::dot_f32>, ref::dequantize_f32);
  set(t, DType::F16, DType::F32, dot_each_token<avx2::dot_f16>, avx2::dequantize_f16);
  set(t, DType::BF16, DType::F32, dot_each_token<avx2::dot_bf16>, avx2::dequantize_bf16);
  set(t, DType::Q4_0, DType::Q8_0, avx2::dot_q4_0_tiles, avx2::dequantize_q4_0);
  t.types[uint32_t(DType::Q4_0)].packed = &avx2::q4_0_packed;
  set(t, DType::Q4_1, DType::Q8_1, dot_each_token<avx2::dot_q4_1>, ref::dequantize_q4_1);
  set(t, DType::Q5_0, DType::Q8_0, avx2::dot_q5_0_tiles, ref::dequantize_q5_0);
  set(t, DType::Q5_1, DType::Q8_1, dot_each_token<avx2::dot_q5_1>, ref::dequantize_q5_1);
  // Q8_0 and Q6_K take f32 activations (kernel-table.h dot_via_dequantize says why).
  set(t, DType::Q8_0, DType::F32, avx2::dot_q8_0_f32, avx2::dequantize_q8_0);
  t.types[uint32_t(DType::Q8_0)].packed = &avx2::q8_0_packed;
  set(t, DType::Q4_K, DType::Q8_K, avx2::dot_q4_k_tiles, ref::dequantize_q4_k);
  t.types[uint32_t(DType::Q4_K)].packed = &avx2::q4_k_packed;
  set(t, DType::Q5_K, DType::Q8_K, avx2::dot_q5_k_tiles, ref::dequantize_q5_k);
  t.types[uint32_t(DType::Q5_K)].packed = &avx2::q5_k_packed;
  set(t, DType::Q6_K, DType::F32, avx2::dot_q6_k_f32, ref::dequantize_q6_k);
  t.types[uint32_t(DType::Q6_K)].packed = &avx2::q6_k_packed;
  set(t, DType::MXFP4, DType::Q8_0, avx2::dot_mxfp4_tiles, avx2::dequantize_mxfp4);
  t.types[uint32_t(DType::MXFP4)].packed = &avx2::mxfp4_packed;
  return t;
}

// AVX2's kernels with its packed layouts' integer products on AVX-VNNI (same bytes, same
// results, fewer instructions).
KernelTable make_avx_vnni_table() {
  KernelTable t = make_avx2_table();
  t.name = "avx-vnni";  // (t.isa stays kAvx2: the AVX2 level, for the small ops and the caps)
  t.types[uint32_t(DType::Q4_0)].packed = &avx_vnni::q4_0_packed;
  t.types[uint32_t(DType::Q8_0)].packed = &avx_vnni::q8_0_packed;
  t.types[uint32_t(DType::Q4_K)].packed = &avx_vnni::q4_k_packed;
  t.types[uint32_t(DType::Q5_K)].packed = &avx_vnni::q5_k_packed;
  t.types[uint32_t(DType::Q6_K)].packed = &avx_vnni::q6_k_packed;
  t.types[uint32_t(DType::MXFP4)].packed = &avx_vnni::mxfp4_packed;
  return t;
}

KernelTable make_avx512_table() {
  KernelTable t = make_avx2_table();
  t.isa = Isa::kAvx512;
  t.name = "avx512";
  set(t, DType::F32, DType::F32, dot_each_token<avx512::dot_f32>, ref::dequantize_f32);
  set(t, DType::F16, DType::F32, dot_each_token<avx512::dot_f16>, avx512::dequantize_f16);
  t.types[uint32_t(DType::F16)].packed = &avx512::f16_packed;
  set(t, DType::BF16, DType::F32, dot_each_token<avx512::dot_bf16>, avx2::dequantize_bf16);
  set(t, DType::Q4_0, DType::Q8_0, dot_each_token<avx512::dot_q4_0>, avx2::dequantize_q4_0);
  t.types[uint32_t(DType::Q4_0)].packed = &avx512::q4_0_packed;
  set(t, DType::Q8_0, DType::F32,
      dot_via_dequantize<avx512::dequantize_q8_0, avx512::dot_f32, 32, 34>,
      avx512::dequantize_q8_0);
  t.types[uint32_t(DType::Q8_0)].packed = &avx512::q8_0_packed;
  t.types[uint32_t(DType::Q4_K)].packed = &avx512::q4_k_packed;
  t.types[uint32_t(DType::Q5_K)].packed = &avx512::q5_k_packed;
  set(t, DType::Q6_K, DType::F32, avx512::dot_q6_k_f32, avx512::dequantize_q6_k);
  t.types[uint32_t(DType::Q6_K)].packed = &avx512::q6_k_packed;
  set(t, DType::MXFP4, DType::Q8_0, dot_each_token<avx512::dot_mxfp4>, avx2::dequantize_mxfp4);
  t.types[uint32_t(DType::MXFP4)].packed = &avx512::mxfp4_packed;
  return t;
}

}  // namespace

std::vector<ArchTable> arch_kernel_tables() {
  static const KernelTable avx512_table = make_avx512_table();
  static const KernelTable avx_vnni_table = make_avx_vnni_table();
  static const KernelTable avx2_table = make_avx2_table();
  return {
      {&avx512_table,
       [](const CpuFeatures& f) {
         return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni && f.avx2 &&
                f.fma && f.f16c;
       }},
      {&avx_vnni_table,
       [](const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c && f.avx_vnni; }},
      {&avx2_table, [](const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; }},
  };
}

}  // namespace hearth::kernels
