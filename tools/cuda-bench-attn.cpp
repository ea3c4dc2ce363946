// hearth-cuda-bench's decode attention table: see cuda-bench-attn.h.
#include "cuda-bench-attn.h"

#include <strings.h>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <cstring>
#include <vector>

#include "cuda-bench-util.h"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/decode-batch.h"

namespace hearth::cuda_bench {

namespace {

struct Shape {
  const char* name;
  int64_t heads, kv_heads, hd;
  bool qk_norms = false;  // Qwen3's per-head q / k RMSNorm, fused as in its decode step
  bool from_d64 = false;  // a depth-64 row too (the MoE models' tg64)
};

int64_t kv_row_bytes(DType t, int64_t hd) {
  return t == DType::Q8_0 ? hd / 32 * 34 : hd * 2;
}

// The kernels timed: the split kernel, launch_attention's dispatch, then the decode kernels'
// grid probes (splits per row, 0 their default; tiles in contiguous runs; the scalar kernel
// where the tensor-core one applies).
struct Variant {
  const char* name;
  int kind;  // 0 split, 1 dispatch, 2 probe
  int splits;
  bool runs, scalar;
};
constexpr Variant kVariants[] = {
    {"split", 0, 0, false, false},   {"dispatch", 1, 0, false, false},
    {"scalar", 2, 0, false, true},   {"dec/12", 2, 12, false, false},
    {"dec/24", 2, 24, false, false}, {"dec/32", 2, 32, false, false},
    {"dec/48", 2, 48, false, false}, {"dec/64", 2, 64, false, false},
    {"dec runs", 2, 0, true, false}, {"scalar/16", 2, 16, false, true}};
constexpr int kNumVariants = int(sizeof(kVariants) / sizeof(kVariants[0]));

// Seconds per decode attention at `depth` for each variant, caches replicated past L2 and
// rotated so each launch reads HBM; err[i]: max |out - split's out| / max |split's out|. False on
// an error.
bool time_all(cudaStream_t s, const Shape& sh, DType t, int64_t depth, double (&sec)[kNumVariants],
              double (&err)[kNumVariants]) {
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
  float* norm = nullptr;
  const int64_t parts = cuda::attention_partials_floats(1, sh.heads, sh.hd, ctx);
  good = good && ok(cudaMalloc(reinterpret_cast<void**>(&q), size_t(qn) * 4), "malloc q") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&out), size_t(qn) * 4), "malloc out") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&kr), size_t(kn) * 4), "malloc k row") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&vr), size_t(kn) * 4), "malloc v row") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&freq), size_t(sh.hd) * 2), "malloc freq") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&partials), size_t(parts) * 4), "malloc parts") &&
         ok(cudaMalloc(&qbuf, cuda::quantized_acts_bytes(1, qn)), "malloc qbuf") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&pos), 4), "malloc pos") &&
         ok(cudaMalloc(reinterpret_cast<void**>(&norm), size_t(sh.hd) * 4), "malloc norm");
  if (good) {
    cuda::launch_fill(norm, 1.0f, sh.hd, s);
    cuda::launch_fill(q, 0.02f, qn, s);
    cuda::launch_fill(kr, 0.01f, kn, s);
    cuda::launch_fill(vr, 0.03f, kn, s);
    cuda::launch_fill(freq, 0.001f, sh.hd / 2, s);
    cudaMemsetAsync(partials, 0, size_t(parts) * 4, s);
    const int32_t p = int32_t(depth);
    cudaMemcpyAsync(pos, &p, 4, cudaMemcpyHostToDevice, s);
    cuda::AttnRope rope{kr, vr, freq, 1};
    if (sh.qk_norms) rope.q_norm = norm, rope.k_norm = norm, rope.norm_eps = 1e-6f;
    const cuda::AttnKv kv{t, t, nullptr};
    const float scale = 1.f / std::sqrt(float(sh.hd));
    const int launches = std::max(n, 32);
    std::vector<float> ref(static_cast<size_t>(qn)), got(ref);
    for (int w = 0; w < kNumVariants && good; ++w) {
      const Variant& var = kVariants[w];
      auto launch = [&](int i) {
        void *kc = ks[size_t(i % n)], *vc = vs[size_t(i % n)];
        if (var.kind == 0)
          cuda::launch_attention_split(q, kc, vc, out, 1, depth, pos, ctx, sh.heads, sh.kv_heads,
                                       sh.hd, scale, partials, s, qbuf, &rope, kv);
        else if (var.kind == 1)
          cuda::launch_attention(q, kc, vc, out, 1, depth, pos, ctx, sh.heads, sh.kv_heads, sh.hd,
                                 scale, partials, s, qbuf, &rope, kv);
        else
          cuda::launch_attention_probe(q, kc, vc, out, depth, pos, ctx, sh.heads, sh.kv_heads,
                                       sh.hd, scale, partials, s, qbuf, &rope, kv, var.splits,
                                       var.runs, var.scalar);
      };
      sec[w] = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i) launch(i);
      });
      launch(0);
      good = ok(cudaStreamSynchronize(s), "attention") &&
             ok(cudaMemcpy(got.data(), out, size_t(qn) * 4, cudaMemcpyDeviceToHost), "download");
      if (w == 0) ref = got;
      double num = 0, den = 0;
      for (int64_t i = 0; i < qn; ++i) {
        num = std::max(num, double(std::fabs(got[size_t(i)] - ref[size_t(i)])));
        den = std::max(den, double(std::fabs(ref[size_t(i)])));
        if (!std::isfinite(got[size_t(i)])) num = INFINITY;
      }
      err[w] = num / (den > 0 ? den : 1);
    }
  }
  for (void* ptr : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(kr),
                    static_cast<void*>(vr), static_cast<void*>(freq), static_cast<void*>(partials),
                    qbuf, static_cast<void*>(pos), static_cast<void*>(norm)})
    cudaFree(ptr);
  for (int i = 0; i < n; ++i) cudaFree(ks[size_t(i)]), cudaFree(vs[size_t(i)]);
  return good;
}

// The B-sequence table's columns: launch_attention_batch's kernels, then the warp form at fixed
// positions a warp.
struct BatchVariant {
  cuda::BatchAttnKernel kernel;
  int warp_chunk;
};
constexpr BatchVariant kBatchVariants[] = {
    {cuda::BatchAttnKernel::kDecode, 0},     {cuda::BatchAttnKernel::kChunked, 0},
    {cuda::BatchAttnKernel::kChosen, 0},     {cuda::BatchAttnKernel::kChunkedBlocks, 0},
    {cuda::BatchAttnKernel::kChunked, 64},   {cuda::BatchAttnKernel::kChunked, 128},
    {cuda::BatchAttnKernel::kChunked, 256},  {cuda::BatchAttnKernel::kChunked, 512},
    {cuda::BatchAttnKernel::kChunked, 1024}, {cuda::BatchAttnKernel::kMerged, 0}};
constexpr int kNumBatchVariants = int(sizeof(kBatchVariants) / sizeof(kBatchVariants[0]));

// Seconds per batched decode attention (launch_attention_batch: B segments, each at position
// `depth` over its own cache), for each of kBatchVariants; caches replicated past L2 and
// rotated. err: max |any variant - chunked| / max |chunked|.
bool time_batch(cudaStream_t s, const Shape& sh, DType t, int64_t B, int64_t depth,
                double (&sec)[kNumBatchVariants], double& err) {
  const int64_t ctx = depth + 1;
  const uint64_t cache = uint64_t(ctx * sh.kv_heads * kv_row_bytes(t, sh.hd));
  const uint64_t set_bytes = 2 * cache * uint64_t(B);
  const int n = int(std::max<uint64_t>(2, (uint64_t(256) << 20) / set_bytes + 1));
  std::vector<uint8_t*> sets(size_t(n), nullptr);
  std::vector<cuda::AttnSegment*> descs(size_t(n), nullptr);
  const int64_t qn = B * sh.heads * sh.hd;
  const int64_t parts = cuda::attention_batch_partials_floats(B, sh.heads, sh.hd, ctx);
  float *q = nullptr, *out = nullptr, *partials = nullptr;
  bool good =
      ok(cudaMalloc(reinterpret_cast<void**>(&q), size_t(qn) * 4), "malloc q") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&out), size_t(qn) * 4), "malloc out") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&partials), size_t(parts) * 4), "malloc parts") &&
      ok(cudaMemsetAsync(partials, 0, size_t(parts) * 4, s), "zero parts");  // (the counters)
  for (int i = 0; i < n && good; ++i) {
    good = ok(cudaMalloc(reinterpret_cast<void**>(&sets[size_t(i)]), set_bytes), "malloc kv") &&
           ok(cudaMalloc(reinterpret_cast<void**>(&descs[size_t(i)]),
                         size_t(B) * sizeof(cuda::AttnSegment)),
              "malloc segs");
    if (!good) break;
    // 0x11 bytes: finite f16 (5e-4) and q8_0 blocks (scale 5e-4, quants 17).
    cudaMemsetAsync(sets[size_t(i)], 0x11, set_bytes, s);
    std::vector<cuda::AttnSegment> segs(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b)
      segs[size_t(b)] = {sets[size_t(i)] + 2 * b * cache, sets[size_t(i)] + (2 * b + 1) * cache,
                         int32_t(depth)};
    good = ok(cudaMemcpy(descs[size_t(i)], segs.data(), segs.size() * sizeof(segs[0]),
                         cudaMemcpyHostToDevice),
              "upload segs");
  }
  std::vector<float> got[kNumBatchVariants];
  if (good) {
    // q varies by element so a mismatch in any row shows.
    std::vector<float> hq(static_cast<size_t>(qn));
    for (int64_t i = 0; i < qn; ++i) hq[size_t(i)] = 0.02f * float(i % 7 - 3);
    good = ok(cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice), "upload q");
    const float scale = 1.f / std::sqrt(float(sh.hd));
    const int launches = std::max(n, 16);
    for (int v = 0; v < kNumBatchVariants && good; ++v) {
      auto launch = [&](int i) {
        return cuda::launch_attention_batch(q, out, descs[size_t(i % n)], B, ctx, sh.heads,
                                            sh.kv_heads, sh.hd, t, scale, partials, s, nullptr,
                                            kBatchVariants[v].kernel, kBatchVariants[v].warp_chunk);
      };
      // One launch into a NaN output first: rows it leaves unwritten are counted.
      cudaMemsetAsync(out, 0xFF, size_t(qn) * 4, s);
      good = ok(launch(0), "attention batch") && ok(cudaStreamSynchronize(s), "attention batch");
      if (!good) break;
      {
        std::vector<float> once(static_cast<size_t>(qn));
        good = ok(cudaMemcpy(once.data(), out, size_t(qn) * 4, cudaMemcpyDeviceToHost), "download");
        const auto unwritten =
            std::count_if(once.begin(), once.end(), [](float x) { return std::isnan(x); });
        if (unwritten)
          std::fprintf(stderr, "cuda-bench: variant %d left %lld of %lld outputs unwritten\n", v,
                       (long long)unwritten, (long long)qn);
      }
      sec[v] = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i) launch(i);
      });
      got[v].resize(size_t(qn));
      good = ok(cudaMemcpy(got[v].data(), out, size_t(qn) * 4, cudaMemcpyDeviceToHost), "download");
    }
  }
  if (good) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got[1].size(); ++i) {
      for (int v = 0; v < kNumBatchVariants; ++v) {
        num = std::max(num, double(std::fabs(got[v][i] - got[1][i])));
        if (!std::isfinite(got[v][i])) num = INFINITY;
      }
      den = std::max(den, double(std::fabs(got[1][i])));
    }
    err = num / (den > 0 ? den : 1);
    if (err > 1e-5)
      for (size_t i = 0; i < got[1].size(); ++i)
        if (!(std::fabs(got[0][i] - got[1][i]) <= 1e-5 * den)) {
          std::fprintf(
              stderr,
              "cuda-bench: first mismatch at segment %lld head %lld dim %lld: %g against %g\n",
              (long long)(i / (sh.heads * sh.hd)), (long long)(i / sh.hd % sh.heads),
              (long long)(i % sh.hd), got[0][i], got[1][i]);
          break;
        }
  }
  cudaFree(q), cudaFree(out), cudaFree(partials);
  for (int i = 0; i < n; ++i) cudaFree(sets[size_t(i)]), cudaFree(descs[size_t(i)]);
  return good;
}

// Whether `only` leaves out shape row si or cache type t.
bool filtered_out(const AttnFilter& only, int si, DType t) {
  return (only.shape >= 0 && only.shape != si) ||
         (only.kv && strcasecmp(only.kv, dtype_name(t)) != 0);
}

}  // namespace

bool decode_attention_table(cudaStream_t s, double copy_gbs, const AttnFilter& only) {
  const Shape shapes[] = {{"llama2-7b 32x128", 32, 32, 128},
                          {"llama3-8b 32/8x128", 32, 8, 128},
                          {"qwen3-moe 32/4x128n", 32, 4, 128, true, true},
                          {"gpt-oss 64/8x64", 64, 8, 64, false, true}};
  const int64_t depths[] = {64, 512, 4096, 8192, 32768};
  std::printf(
      "\n== decode attention, one layer, rope + int8 out fused: us a launch, GB/s of K+V "
      "read (copy %.0f GB/s r+w), max diff vs split ==\n",
      copy_gbs);
  for (int si = 0; si < 4; ++si)
    for (DType t : {DType::F16, DType::Q8_0})
      for (int64_t d : depths) {
        const Shape& sh = shapes[si];
        if (filtered_out(only, si, t) || (only.depth > 0 && only.depth != d)) continue;
        if (d == 64 && !sh.from_d64) continue;
        double sec[kNumVariants] = {}, err[kNumVariants] = {};
        if (!time_all(s, sh, t, d, sec, err)) return false;
        const double bytes = 2.0 * double(d + 1) * double(sh.kv_heads * kv_row_bytes(t, sh.hd));
        std::printf("%-18s %-4s d=%-6lld %6.1f MB", sh.name, dtype_name(t), (long long)d,
                    bytes / 1e6);
        for (int w = 0; w < kNumVariants; ++w)
          std::printf(" | %s %.2f us %.0f GB/s%s", kVariants[w].name, sec[w] * 1e6,
                      bytes / sec[w] / 1e9, err[w] > 1e-3 ? " MISMATCH" : "");
        std::printf("\n");
      }
  return true;
}

bool batch_attention_table(cudaStream_t s, double copy_gbs, const AttnFilter& only) {
  const Shape shapes[] = {{"llama2-7b 32x128", 32, 32, 128}, {"llama3-8b 32/8x128", 32, 8, 128}};
  std::vector<int64_t> batches = {8, 32, 64}, depths = {100, 150, 228, 512, 2048};
  if (only.batch > 0) batches = {only.batch};
  if (only.depth > 0) depths = {only.depth};
  std::printf(
      "\n== decode attention of B sequences, one layer (attention + combine): us a launch, GB/s "
      "of K+V read (copy %.0f GB/s r+w), decode kernels | chunked (a warp a chunk) | the one "
      "chosen | chunked, a block a chunk | a warp 64, 128, 256, 512, 1024 positions | merged "
      "blocks ==\n",
      copy_gbs);
  for (int si = 0; si < 2; ++si)
    for (DType t : {DType::F16, DType::Q8_0})
      for (int64_t B : batches)
        for (int64_t depth : depths) {
          const Shape& sh = shapes[si];
          if (filtered_out(only, si, t)) continue;
          double sec[kNumBatchVariants] = {}, err = 0;
          if (!time_batch(s, sh, t, B, depth, sec, err)) return false;
          const double bytes =
              2.0 * double(B) * double(depth + 1) * double(sh.kv_heads * kv_row_bytes(t, sh.hd));
          std::printf(
              "%-18s %-4s B=%-3lld d=%-5lld %7.1f MB | %7.2f us %5.0f GB/s | %7.2f us %5.0f GB/s",
              sh.name, dtype_name(t), (long long)B, (long long)depth, bytes / 1e6, sec[0] * 1e6,
              bytes / sec[0] / 1e9, sec[1] * 1e6, bytes / sec[1] / 1e9);
          for (int v = 2; v < kNumBatchVariants; ++v) std::printf(" | %7.2f", sec[v] * 1e6);
          std::printf("%s\n", err > 1e-5 ? " MISMATCH" : "");
        }
  return true;
}

}  // namespace hearth::cuda_bench
