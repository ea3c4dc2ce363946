// What the processor can do, read once (cpuid on x86, hwcaps on ARM). Kernels pick their ISA
// from this at start-up; HEARTH_ISA names a table or caps the level for tests (dispatch.cpp).
#pragma once

#include <string>

namespace hearth {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  // AMX: the CPU has it and the OS saves its state (XCR0 bits 17-18). Linux still wants each
  // process to ask before touching tile data: see request_amx_permission().
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool neon = false, arm_dotprod = false, arm_i8mm = false;
  std::string summary() const;
};

const CpuFeatures& cpu_features();

// Asks the kernel once per process for the AMX tile-data state (Linux >= 5.16:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)). True when AMX instructions may run here:
// amx_tile and the permission granted. Without it the first tile load would SIGILL.
bool request_amx_permission();

}  // namespace hearth
