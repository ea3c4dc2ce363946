// hearth-cuda-bench's sampled-pick table: see cuda-bench-sample.h.
#include "cuda-bench-sample.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda-bench-util.h"
#include "kernels/cuda/argmax-ops.h"

namespace hearth::cuda_bench {

namespace {

// Logits of one row: "peaked" (a trained model: a few tokens far above a wide normal body),
// "normal" (one normal body, sd 1), "flat" (sd 0.25: a random-weight model, whose nucleus holds
// most of the vocabulary), "uniform" (the op tests' [-6, 6]).
constexpr const char* kKinds[] = {"peaked", "normal", "flat", "uniform"};
std::vector<float> row_logits(int64_t n, int kind, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, kind == 0 ? 2.5f : kind == 1 ? 1.0f : 0.25f);
  std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = kind == 3 ? uniform(g) : normal(g);
  if (kind == 0)
    for (int i = 0; i < 8; ++i) v[size_t(g() % uint32_t(n))] = 14.0f + float(i);
  return v;
}

struct Rule {
  const char* name;
  float temperature;
  int top_k;
  float top_p, min_p;
};
constexpr Rule kRules[] = {{"greedy", 0.0f, 0, 1.0f, 0.0f},
                           {"T0.8 p0.95 min-p0.05", 0.8f, 0, 0.95f, 0.05f},
                           {"+ top-k 40", 0.8f, 40, 0.95f, 0.05f},
                           {"top-p 0.95 only", 0.8f, 0, 0.95f, 0.0f}};

}  // namespace

bool sample_pick_table(cudaStream_t s) {
  constexpr int kPerGraph = 20;
  std::printf("\nsampled picks, us a pick (one row; cluster of %d / %d blocks at 32k / 128k)\n",
              cuda::sample_pick_cluster_blocks(32000), cuda::sample_pick_cluster_blocks(128256));
  std::printf("%-8s %-8s", "ids", "logits");
  for (const Rule& r : kRules) std::printf(" %22s", r.name);
  std::printf("\n");
  constexpr int kMaxRows = 32;
  float* logits = nullptr;
  int32_t *ints = nullptr, *host = nullptr;
  cuda::SampleRowPick* table = nullptr;
  if (!ok(cudaMalloc(reinterpret_cast<void**>(&logits), size_t(kMaxRows) * 151936 * sizeof(float)),
          "logits") ||
      !ok(cudaMalloc(reinterpret_cast<void**>(&ints), 4096 * sizeof(int32_t)), "ints") ||
      !ok(cudaMallocHost(reinterpret_cast<void**>(&host), 64 * sizeof(int32_t)), "host") ||
      !ok(cudaMalloc(reinterpret_cast<void**>(&table), kMaxRows * sizeof(cuda::SampleRowPick)),
          "table"))
    return false;
  float* work = nullptr;
  if (!ok(cudaMalloc(reinterpret_cast<void**>(&work), 151936 * sizeof(float)), "work"))
    return false;
  bool good = true;
  for (int64_t n : {int64_t(32000), int64_t(128256), int64_t(151936)}) {
    for (int kind = 0; kind < 4; ++kind) {
      // Every row of the buffer: the bench's first row, and the served step's rows below.
      for (int r = 0; r < kMaxRows; ++r) {
        const std::vector<float> v = row_logits(n, kind, uint32_t(n + 100 * kind + r));
        good &= ok(cudaMemcpy(logits + int64_t(r) * n, v.data(), v.size() * sizeof(float),
                              cudaMemcpyHostToDevice),
                   "upload");
      }
      std::printf("%-8lld %-8s", (long long)n, kKinds[kind]);
      for (const Rule& r : kRules) {
        cuda::SamplePickParams p;
        p.temperature = r.temperature, p.top_k = r.top_k, p.top_p = r.top_p, p.min_p = r.min_p;
        p.seed = 42;
        cudaMemset(ints, 0, 4096 * sizeof(int32_t));
        const double sec = time_graph(s, kPerGraph, [&] {
          for (int i = 0; i < kPerGraph; ++i) {
            if (r.temperature <= 0.0f)
              (void)cuda::launch_greedy_pick(logits, n, ints, ints + 1, 1, host, s);
            else
              (void)cuda::launch_sample_pick(logits, work, n, p, ints + 8, ints + 4000, 3000, ints,
                                             ints + 1, 100 + i, host, s);
          }
        });
        std::printf(" %22.1f", sec * 1e6);
      }
      std::printf("\n");
      // A served step's draws: rows each in their own launch, then all in one.
      if (kind != 2) continue;
      for (int rows : {8, 32}) {
        std::vector<cuda::SampleRowPick> t(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) {
          t[size_t(r)].p.temperature = 0.8f, t[size_t(r)].p.top_p = 0.95f;
          t[size_t(r)].p.min_p = 0.05f, t[size_t(r)].p.seed = uint64_t(r);
          t[size_t(r)].row = r, t[size_t(r)].next_pos = 100 + r;
        }
        good &= ok(cudaMemcpy(table, t.data(), t.size() * sizeof(t[0]), cudaMemcpyHostToDevice),
                   "table");
        const double each = time_graph(s, 1, [&] {
          for (int r = 0; r < rows; ++r)
            (void)cuda::launch_sample_pick(logits + int64_t(r) * n, work, n, t[size_t(r)].p,
                                           ints + 8, ints + 4000, 3000, ints + 2000 + r, ints + 1,
                                           100 + r, host, s);
        });
        const double one = time_graph(
            s, 1, [&] { (void)cuda::launch_sample_picks(logits, n, table, rows, ints + 2000, s); });
        std::printf("  %d rows (chat rule): a launch each %.1f us, one launch %.1f us\n", rows,
                    each * 1e6, one * 1e6);
      }
    }
  }
  good &= ok(cudaStreamSynchronize(s), "sample picks");
  cudaFree(logits);
  cudaFree(ints);
  cudaFree(work);
  cudaFree(table);
  cudaFreeHost(host);
  return good;
}

}  // namespace hearth::cuda_bench
