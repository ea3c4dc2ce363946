// What the processor can do, read once (cpuid on x86, hwcaps on ARM). Kernels pick their ISA
// from this at start-up; HEARTH_ISA=ref|avx2|avx512|neon forces a lower one for tests.
#pragma once

#include <string>

namespace hearth {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool neon = false, arm_dotprod = false, arm_i8mm = false;
  std::string summary() const;
};

const CpuFeatures& cpu_features();

}  // namespace hearth
