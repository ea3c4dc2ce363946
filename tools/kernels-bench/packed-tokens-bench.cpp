// hearth-packed-tokens-bench: the packed matmul kernels (the CPU's decode path) per token count,
// 1..8 tokens, one thread, us per token: a tile of T tokens must cost at most T one-token passes,
// and rows where it costs more are marked. This is how a two-token Q8_0 tile was found to keep
// its accumulators on the stack (2026-12-05: slower per token than one token).
// Usage: hearth-packed-tokens-bench [rows cols [reps]] (default 2048 x 2048, 20 reps; the best of
// 5 rounds, each over every token count, is printed). HEARTH_ISA caps the kernel table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "base/thread-pool.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

using namespace hearth;

int main(int argc, char** argv) {
  const int64_t d = argc > 2 ? std::atoll(argv[1]) : 2048,
                n = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 20;
  constexpr int kMaxTokens = 8;
  ThreadPool pool(1);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> wf(size_t(d * n)), x(size_t(kMaxTokens * n)), y(size_t(kMaxTokens * d));
  for (float& v : wf) v = nd(rng);
  for (float& v : x) v = nd(rng);
  std::printf("packed matmul %lldx%lld, one thread, us per token (best of 5 rounds of %d)\n",
              (long long)d, (long long)n, reps);
  std::printf("%-5s", "type");
  for (int t = 1; t <= kMaxTokens; ++t) std::printf(" %8s%d", "T=", t);
  std::printf("\n");
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4}) {
    const auto packed_bytes = kernels::packed_size(t, d, n);
    const auto rb = row_bytes(t, uint64_t(n));
    if (!packed_bytes || !rb) {
      std::printf("%-5s (no packed layout for this shape on this table)\n", dtype_name(t));
      continue;
    }
    std::vector<uint8_t> wq(*rb * uint64_t(d));
    if (!kernels::quantize_rows(t, wf.data(), wq.data(), d, n, nullptr).is_ok()) {
      std::printf("%-5s (no quantizer)\n", dtype_name(t));
      continue;
    }
    const TensorView w{"w", t, {d, n}, wq.data(), wq.size()};
    std::unique_ptr<uint8_t, decltype(&std::free)> packed(
        static_cast<uint8_t*>(std::aligned_alloc(64, (*packed_bytes + 63) / 64 * 64)), std::free);
    kernels::pack_weight(w, packed.get(), pool);
    // Rounds outside token counts, so a noisy spell on a shared host hits every count alike.
    double best[kMaxTokens + 1];
    std::fill(std::begin(best), std::end(best), 1e30);
    for (int round = 0; round < 5; ++round)
      for (int nt = 1; nt <= kMaxTokens; ++nt) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
          kernels::matmul_packed(t, packed.get(), d, n, x.data(), nt, y.data(), pool);
        best[nt] = std::min(
            best[nt],
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
      }
    std::printf("%-5s", dtype_name(t));
    const double one = best[1] * 1e6;
    for (int nt = 1; nt <= kMaxTokens; ++nt) {
      const double per_token = best[nt] * 1e6 / nt;
      // (a tile dearer per token than one token alone: a kernel fault, not noise, past 10%)
      std::printf(" %8.1f%s", per_token, nt > 1 && per_token > 1.1 * one ? "!" : " ");
    }
    std::printf("\n");
  }
  return 0;
}
