// The x86 AMX prefill GEMM (amx-gemm.cpp, compiled with -mamx-*): exported as a PrefillGemm so
// baseline-compiled drivers can reach it without an AMX instruction outside that file.
#pragma once

#include "kernels/cpu/kernel-table.h"

namespace hearth::kernels::amx {

// The bf16 tile GEMM when the CPU has AMX-BF16 + AVX512-BF16 and Linux granted the tile state;
// nullptr otherwise (asks for the permission on first call).
const PrefillGemm* bf16_prefill_gemm();

}  // namespace hearth::kernels::amx
