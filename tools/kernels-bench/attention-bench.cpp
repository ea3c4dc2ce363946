// hearth-attention-bench: one decode step's attention (one query token, one thread) over a KV
// cache of each element type, on every SmallOps table this CPU runs, best of N calls. Three
// shapes: kjv-13m's (4 heads of 64, 1024 positions: the cache fits in L2/L3), a 7B GQA layer's
// (32 heads, 8 kv heads of 128, 8192 positions: 32 MiB of f32 K+V) and a Gemma 2 9B layer's (16
// heads, 8 kv heads of 256, 4096 positions). The same cache is read every call, so what it
// times is the loops with the rows in the caches as far as they fit, not a decode step's memory
// traffic. A tool, not a test. Usage: hearth-attention-bench [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/small-ops.h"
#include "kernels/ops.h"

using namespace hearth;
using namespace hearth::kernels;

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  struct Shape {
    const char* name;
    int64_t heads, kv_heads, head_dim, positions;
  };
  const Shape shapes[] = {{"kjv-13m layer", 4, 4, 64, 1024},
                          {"7B GQA layer", 32, 8, 128, 8192},
                          {"Gemma 2 9B layer", 16, 8, 256, 4096}};
  ThreadPool pool(1);
  std::printf(
      "| shape | table | type | us per call | ns per (position, head) "
      "|\n|---|---|---|---:|---:|\n");
  for (const Shape& s : shapes) {
    const int64_t kvd = s.kv_heads * s.head_dim;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> q(size_t(s.heads * s.head_dim)), out(q.size());
    std::vector<float> k(size_t(s.positions * kvd)), v(k.size());
    for (auto* vec : {&q, &k, &v})
      for (float& x : *vec) x = dist(rng);
    int n = 0;
    const SmallOps* const* tables = supported_small_ops(&n);
    for (int ti = 0; ti < n; ++ti)
      for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
        std::vector<uint8_t> kb(size_t(s.positions * kv_row_bytes(t, kvd))), vb(kb.size());
        store_kv_rows(t, k.data(), kb.data(), s.positions, kvd);
        store_kv_rows(t, v.data(), vb.data(), s.positions, kvd);
        double best = 1e30;
        for (int r = 0; r < repeats; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          attention_with(*tables[ti], q.data(), KvRows{kb.data(), t}, KvRows{vb.data(), t},
                         out.data(), 1, s.positions - 1, s.heads, s.kv_heads, s.head_dim, 0.1f,
                         AttentionMask{}, pool);
          best = std::min(
              best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count());
        }
        std::printf("| %s | %s | %s | %.1f | %.2f |\n", s.name, tables[ti]->name, dtype_name(t),
                    best, best * 1e3 / double(s.positions * s.heads));
      }
  }
  return 0;
}
