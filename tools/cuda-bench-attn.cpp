// hearth-cuda-bench's decode attention table: see cuda-bench-attn.h.
#include "cuda-bench-attn.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda-bench-util.h"
#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda_bench {

namespace {

struct Shape {
  const char* name;
  int64_t heads, kv_heads, hd;
};

int64_t kv_row_bytes(DType t, int64_t hd) {
  return t == DType::Q8_0 ? hd / 32 * 34 : hd * 2;
}

// Seconds per decode attention at `depth` for both kernels (split first), caches replicated past
// L2 and rotated so each launch reads HBM. False on an error.
bool time_both(cudaStream_t s, const Shape& sh, DType t, int64_t depth, double (&sec)[2]) {
  const int64_t ctx = depth + 256;  // the cache's capacity (max_ctx), as -c depth+256
  const uint64_t cache = uint64_t(ctx * sh.kv_heads * kv_row_bytes(t, sh.hd));
  const int n = int(std::max<uint64_t>(2, (uint64_t(256) << 20) / (2 * cache) + 1));
  std::vector<void*> ks(static_cast<size_t>(n), nullptr), vs(ks);
  bool good = true;
  for (int i = 0; i < n; ++i) {
    good = good && ok(cudaMalloc(&ks[size_t(i)], cache), "malloc k") &&
           ok(cudaMalloc(&vs[size_t(i)], cache), "malloc v");
    if (!good) break;
    // 0x11 bytes: finite f16 (5e-4) and q8_0 blocks (scale 5e-4, quants 17).
    cudaMemsetAsync(ks[size_t(i)], 0x11, cache, s);
    cudaMemsetAsync(vs[size_t(i)], 0x11, cache, s);
  }
  const int64_t qn = sh.heads * sh.hd, kn = sh.kv_heads * sh.hd;
  float *q = nullptr, *kr = nullptr, *vr = nullptr, *freq = nullptr, *out = nullptr;
  float* partials = nullptr;
  void* qbuf = nullptr;
  int32_t* pos = nullptr;
  const int64_t parts = cuda::attention_partials_floats(1, sh.heads, sh.hd, ctx);
  good = good && ok(cudaMalloc(reinterpret_cast<void**>(&q), size_t(qn) * 4), "malloc q") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&out), size_t(qn) * 4), "malloc out") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&kr), size_t(kn) * 4), "malloc k row") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&vr), size_t(kn) * 4), "malloc v row") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&freq), size_t(sh.hd) * 2), "malloc freq") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&partials), size_t(parts) * 4), "malloc parts") &&
         ok(cudaMalloc(&qbuf, cuda::quantized_acts_bytes(1, qn)), "malloc qbuf") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&pos), 4), "malloc pos");
  if (good) {
    cuda::launch_fill(q, 0.02f, qn, s);
    cuda::launch_fill(kr, 0.01f, kn, s);
    cuda::launch_fill(vr, 0.03f, kn, s);
    cuda::launch_fill(freq, 0.001f, sh.hd / 2, s);
    cudaMemsetAsync(partials, 0, size_t(parts) * 4, s);
    const int32_t p = int32_t(depth);
    cudaMemcpyAsync(pos, &p, 4, cudaMemcpyHostToDevice, s);
    const cuda::AttnRope rope{kr, vr, freq, 1};
    const cuda::AttnKv kv{t, t, nullptr};
    const float scale = 1.f / std::sqrt(float(sh.hd));
    const int launches = std::max(n, 32);
    for (int which = 0; which < 2 && good; ++which) {
      auto* fn = which == 0 ? cuda::launch_attention_split : cuda::launch_attention;
      sec[which] = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i)
          fn(q, ks[size_t(i % n)], vs[size_t(i % n)], out, 1, depth, pos, ctx, sh.heads,
             sh.kv_heads, sh.hd, scale, partials, s, qbuf, &rope, kv);
      });
      good = ok(cudaStreamSynchronize(s), "attention");
    }
  }
  for (void* ptr : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(kr),
                    static_cast<void*>(vr), static_cast<void*>(freq), static_cast<void*>(partials),
                    qbuf, static_cast<void*>(pos)})
    cudaFree(ptr);
  for (int i = 0; i < n; ++i) cudaFree(ks[size_t(i)]), cudaFree(vs[size_t(i)]);
  return good;
}

}  // namespace

bool decode_attention_table(cudaStream_t s, double copy_gbs) {
  const Shape shapes[] = {{"llama2-7b 32x128", 32, 32, 128}, {"llama3-8b 32/8x128", 32, 8, 128}};
  const int64_t depths[] = {512, 4096, 8192, 32768};
  std::printf(
      "\n== decode attention, one layer, rope + int8 out fused: split kernel vs dispatch "
      "(GB/s of K+V read; copy %.0f GB/s r+w) ==\n",
      copy_gbs);
  for (const Shape& sh : shapes)
    for (DType t : {DType::F16, DType::Q8_0})
      for (int64_t d : depths) {
        double sec[2] = {0, 0};
        if (!time_both(s, sh, t, d, sec)) return false;
        const double bytes = 2.0 * double(d + 1) * double(sh.kv_heads * kv_row_bytes(t, sh.hd));
        std::printf(
            "%-20s %-4s d=%-6lld %7.1f MB | split %8.2f us %6.0f GB/s | dispatch %8.2f us "
            "%6.0f GB/s (%4.1f%% of copy) x%.2f\n",
            sh.name, dtype_name(t), (long long)d, bytes / 1e6, sec[0] * 1e6, bytes / sec[0] / 1e9,
            sec[1] * 1e6, bytes / sec[1] / 1e9, 100.0 * bytes / sec[1] / 1e9 / copy_gbs,
            sec[0] / sec[1]);
      }
  return true;
}

}  // namespace hearth::cuda_bench
