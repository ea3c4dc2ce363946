// hearth-matvec-bench: single-thread matvec throughput (GB/s of weights streamed) per dtype and
// ISA table, on a 4096x4096 matrix by default. Usage: hearth-matvec-bench [rows cols [reps]].
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/quantize.h"

using namespace hearth;

int main(int argc, char** argv) {
  const int64_t d = argc > 2 ? std::atoll(argv[1]) : 4096,
                n = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 50;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> wf(size_t(d * n)), x(static_cast<size_t>(n)), y(static_cast<size_t>(d));
  for (float& v : wf) v = nd(rng);
  for (float& v : x) v = nd(rng);
  ThreadPool pool(1);
  std::printf("matvec %lldx%lld, 1 thread, %d reps (weights stream from memory: %.0f MiB+)\n",
              (long long)d, (long long)n, reps, d * n * 0.5 / (1 << 20));
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16}) {
    const uint64_t rb = *row_bytes(t, uint64_t(n));
    std::vector<uint8_t> wq(rb * uint64_t(d));
    if (!kernels::quantize_rows(t, wf.data(), wq.data(), d, n, nullptr).is_ok()) return 1;
    TensorView w{"w", t, {d, n}, wq.data(), wq.size()};
    for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
      if (table->isa == kernels::Isa::kRef && t != DType::Q4_0) continue;
      kernels::matmul_with_table(*table, w, x.data(), 1, y.data(), pool);  // warm up
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r)
        kernels::matmul_with_table(*table, w, x.data(), 1, y.data(), pool);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      std::printf("  %-5s %-7s %8.3f ms  %6.2f GB/s\n", dtype_name(t), table->name, s * 1e3,
                  double(wq.size()) / s / 1e9);
    }
  }
  return 0;
}
