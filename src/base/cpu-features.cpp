// cpuid / getauxval probing behind cpu_features().
#include "base/cpu-features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace hearth {

namespace {

CpuFeatures probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid(1, a, b, c, d);
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
    const bool osxsave = c & (1u << 27);
    unsigned long long xcr0 = 0;
    if (osxsave) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (uint64_t(hi) << 32) | lo;
    }
    const bool ymm_ok = (xcr0 & 0x6) == 0x6;
    const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = ymm_ok && (b & (1u << 5));
    f.avx512f = zmm_ok && (b & (1u << 16));
    f.avx512dq = zmm_ok && (b & (1u << 17));
    f.avx512bw = zmm_ok && (b & (1u << 30));
    f.avx512vl = zmm_ok && (b & (1u << 31));
    f.avx512_vnni = zmm_ok && (c & (1u << 11));
    // Leaf 7 EDX: AMX-BF16 bit 22, AMX-TILE bit 24, AMX-INT8 bit 25; XCR0 bits 17 (TILECFG)
    // and 18 (TILEDATA) say the OS context-switches the tiles.
    const bool tiles_ok = (xcr0 & (3ull << 17)) == (3ull << 17);
    f.amx_tile = tiles_ok && (d & (1u << 24));
    f.amx_bf16 = f.amx_tile && (d & (1u << 22));
    f.amx_int8 = f.amx_tile && (d & (1u << 25));
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = zmm_ok && (a & (1u << 5));
    f.avx_vnni = ymm_ok && (a & (1u << 4));
    if (!ymm_ok) f.fma = f.f16c = false;
  }
#endif
#if defined(__aarch64__)
  unsigned long hw = getauxval(AT_HWCAP);
  f.neon = true;
#ifdef HWCAP_ASIMDDP
  f.arm_dotprod = hw & HWCAP_ASIMDDP;
#endif
#ifdef HWCAP2_I8MM
  f.arm_i8mm = getauxval(AT_HWCAP2) & HWCAP2_I8MM;
#endif
  (void)hw;
#endif
  return f;
}

bool ask_for_amx() {
  if (!cpu_features().amx_tile) return false;
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h, Linux 5.16
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;  // other OSes: no AMX until someone checks how they grant it
#endif
}

}  // namespace

bool request_amx_permission() {
  static const bool granted = ask_for_amx();
  return granted;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512_vnni, "avx512vnni");
  add(avx512_bf16, "avx512bf16");
  add(avx_vnni, "avxvnni");
  add(amx_bf16, "amx-bf16");
  add(amx_int8, "amx-int8");
  add(neon, "neon");
  add(arm_dotprod, "dotprod");
  return s.empty() ? "scalar" : s;
}

}  // namespace hearth
