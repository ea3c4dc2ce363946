// HEARTH_SIMD_CLONES on a function definition: GCC builds it for AVX-512, AVX2 and the x86-64
// baseline, and the dynamic loader picks the widest the CPU has (target_clones). For plain loops
// written so the compiler vectorises them (fixed-width blocks, selects instead of branches), in
// files that are otherwise built for the baseline. The clones stay local to the defining file;
// callers elsewhere reach them through the ifunc. Clang wants the attribute on every declaration,
// so it builds the baseline alone, as do sanitizer builds, whose instrumentation and ifunc
// resolvers do not mix.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HEARTH_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HEARTH_SIMD_CLONES
#endif
