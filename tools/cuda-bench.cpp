// hearth-cuda-bench: GEMV bandwidth per weight dtype on llama2-7b-sized matrices against a
// device-to-device copy measured in the same run, the batched decode matmul for B = 1..256
// (cuda-bench-batch.cpp), the MoE decode gather-GEMVs (cuda-bench-moe.cpp), plus prefill GEMM
// (T=512) throughput and the prefill attention of one 7B layer.
// Weights rotate over replicas larger than L2 so the numbers are HBM, not cache. Add a dtype or
// shape in the tables at the top of main(). `hearth-cuda-bench --dtypes F16,Q4_0` limits the GEMV
// table to those dtypes ("none": no GEMV table); `--moe-only` runs only the MoE decode table,
// `--attention-only` only the decode attention table (cuda-bench-attn.cpp),
// `--attention-batch-only` that of a step of many sequences, `--sample-only` only the sampled picks
// (cuda-bench-sample.cpp).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../tests/ops/cuda/random-weights.h"
#include "cuda-bench-attn.h"
#include "cuda-bench-batch.h"
#include "cuda-bench-moe.h"
#include "cuda-bench-sample.h"
#include "cuda-bench-util.h"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/gemm-fp8.h"

using namespace hearth;
using cuda_bench::ok;
using cuda_bench::time_graph;

namespace {

// F16 prefill GEMM (T=512) with the FP8 correction pass (gemm-fp8.h, the backend's default when
// the weight has an e4m3 copy): time of launch_matmul both ways, and the relative error of the
// FP8 path and of one fp16 pass against two fp16 passes (x = hi + lo). One line per shape.
bool fp8_gemm_line(cudaStream_t s, cublasHandle_t blas, int64_t rows, int64_t cols) {
  const int64_t T = 512;
  const int64_t nw = rows * cols, nx = T * cols, ny = T * rows;
  std::vector<uint8_t> host = test::random_weight_bytes(DType::F16, rows, cols, 9);
  void *w16 = nullptr, *w8 = nullptr, *ws2 = nullptr, *ws8 = nullptr;
  float *x = nullptr, *yref = nullptr, *y1 = nullptr, *y8 = nullptr;
  cuda::DeviceWeight dw = cuda::make_device_weight(DType::F16, rows, cols, nullptr);
  const size_t b8 = cuda::weight_e4m3_bytes(DType::F16, rows, cols);
  bool good = b8 > 0 && ok(cudaMalloc(&w16, size_t(nw) * 2), "w16") &&
              ok(cudaMalloc(&w8, b8), "w8") &&
              ok(cudaMalloc(reinterpret_cast<void**>(&x), size_t(nx) * 4), "x") &&
              ok(cudaMalloc(reinterpret_cast<void**>(&yref), size_t(ny) * 4), "y") &&
              ok(cudaMalloc(reinterpret_cast<void**>(&y1), size_t(ny) * 4), "y") &&
              ok(cudaMalloc(reinterpret_cast<void**>(&y8), size_t(ny) * 4), "y");
  if (!good) return false;
  cudaMemcpy(w16, host.data(), size_t(nw) * 2, cudaMemcpyHostToDevice);
  cuda::launch_hash_fill(x, nx, 3, -2.f, 2.f, s);
  dw = cuda::make_device_weight(DType::F16, rows, cols, static_cast<const uint8_t*>(w16));
  cuda::DeviceWeight dw8 = dw;
  const float* scale = nullptr;
  cuda::launch_weight_to_e4m3(DType::F16, w16, rows, cols, w8, &scale, s);
  dw8.w8 = static_cast<const uint8_t*>(w8);
  dw8.w8_scale = scale;
  const size_t wsb2 = cuda::matmul_workspace_bytes(dw, T),
               wsb8 = cuda::matmul_workspace_bytes(dw8, T);
  if (!ok(cudaMalloc(&ws2, wsb2), "ws") || !ok(cudaMalloc(&ws8, wsb8), "ws")) return false;
  const bool supported = cuda::fp8_gemm_supported(blas, rows, cols, T);
  cuda::launch_matmul(dw, x, T, yref, ws2, wsb2, blas, s);  // two fp16 passes (the reference)
  cuda::launch_matmul(dw8, x, T, y8, ws8, wsb8, blas, s);
  // One fp16 pass: x16 (the first half of the workspace) holds fp16(x) after the split.
  const float one = 1.f, zero = 0.f;
  auto one_pass = [&] {
    cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(T), int(cols), &one, w16,
                 CUDA_R_16F, int(cols), ws2, CUDA_R_16F, int(cols), &zero, y1, CUDA_R_32F,
                 int(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  one_pass();
  const cudaError_t err = cudaStreamSynchronize(s);
  std::vector<float> r(static_cast<size_t>(ny)), a(r.size()), b(r.size());
  cudaMemcpy(r.data(), yref, size_t(ny) * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(a.data(), y1, size_t(ny) * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(b.data(), y8, size_t(ny) * 4, cudaMemcpyDeviceToHost);
  double num1 = 0, num8 = 0, den = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    num1 += (double(a[i]) - r[i]) * (double(a[i]) - r[i]);
    num8 += (double(b[i]) - r[i]) * (double(b[i]) - r[i]);
    den += double(r[i]) * r[i];
  }
  double t_two = 0, t_fp8 = 0, t_one = 0, t_split = 0, t_lt = 0;
  void *hi = nullptr, *lo8 = nullptr, *sc = nullptr, *lt_ws = nullptr;
  if (err == cudaSuccess && ok(cudaMalloc(&hi, size_t(nx) * 2), "hi") &&
      ok(cudaMalloc(&lo8, size_t(nx)), "lo8") && ok(cudaMalloc(&sc, 256), "sc") &&
      ok(cudaMalloc(&lt_ws, cuda::kFp8LtWorkspace), "lt ws")) {
    // The FP8 path's two extra parts alone: x split (amax, hi, e4m3 lo) and the e4m3 GEMM.
    t_split = time_graph(s, 4, [&] {
      for (int i = 0; i < 4; ++i)
        cuda::launch_split_x_fp8(x, nx, hi, static_cast<uint8_t*>(lo8), static_cast<float*>(sc), s);
    });
    if (supported)
      t_lt = time_graph(s, 4, [&] {
        for (int i = 0; i < 4; ++i)
          cuda::fp8_gemm_accumulate(blas, dw8.w8, dw8.w8_scale, static_cast<uint8_t*>(lo8),
                                    static_cast<float*>(sc), y8, rows, cols, T, lt_ws,
                                    cuda::kFp8LtWorkspace, s);
      });
  }
  for (void* p : {hi, lo8, sc, lt_ws}) cudaFree(p);
  if (err == cudaSuccess) {
    t_two = time_graph(s, 4, [&] {
      for (int i = 0; i < 4; ++i) cuda::launch_matmul(dw, x, T, yref, ws2, wsb2, blas, s);
    });
    t_fp8 = time_graph(s, 4, [&] {
      for (int i = 0; i < 4; ++i) cuda::launch_matmul(dw8, x, T, y8, ws8, wsb8, blas, s);
    });
    t_one = time_graph(s, 4, [&] {
      for (int i = 0; i < 4; ++i) one_pass();
    });
  }
  std::printf(
      "F16 %5lldx%-5lld T=512: two fp16 passes %7.1f us | fp16 + fp8 %7.1f us (err %.2e) | one "
      "fp16 pass %7.1f us (err %.2e) | split %5.1f us, e4m3 GEMM %5.1f us | FP8 plan T=512 %s, "
      "T=17 %s%s%s\n",
      (long long)rows, (long long)cols, t_two * 1e6, t_fp8 * 1e6, std::sqrt(num8 / den),
      t_one * 1e6, std::sqrt(num1 / den), t_split * 1e6, t_lt * 1e6, supported ? "yes" : "NO",
      cuda::fp8_gemm_supported(blas, rows, cols, 17) ? "yes" : "no",
      cuda::gemm_fp8_working() ? "" : " (FP8 GEMM FAILED)", err != cudaSuccess ? " ERROR" : "");
  for (void* p : {w16, w8, ws2, ws8, static_cast<void*>(x), static_cast<void*>(yref),
                  static_cast<void*>(y1), static_cast<void*>(y8)})
    cudaFree(p);
  return err == cudaSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as printed, even if a kernel faults
  const DType dtypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                          DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                          DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  const char* only = nullptr;          // --dtypes F16,BF16: only those dtypes
  bool batch_only = false;             // --batch-only: only the batched decode matmul table
  const char* batch_sizes = nullptr;   // --batch-sizes 32,64: only those B in that table
  const char* batch_shapes = nullptr;  // --batch-shapes 11008x4096: only those shapes there
  bool moe_only = false;               // --moe-only: only the MoE decode table
  bool attn_only = false;              // --attention-only: only the decode attention table
  bool attn_batch_only = false;        // --attention-batch-only: only the B-sequence one
  bool sample_only = false;            // --sample-only: only the sampled-pick table
  cuda_bench::AttnFilter
      attn;  // --attn-depth D, --attn-batch B, --attn-kv f16|q8_0, --attn-shape 0|1|2|3
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dtypes") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--batch-only") == 0) {
      batch_only = true;
    } else if (std::strcmp(argv[i], "--batch-sizes") == 0 && i + 1 < argc) {
      batch_sizes = argv[++i];
    } else if (std::strcmp(argv[i], "--batch-shapes") == 0 && i + 1 < argc) {
      batch_shapes = argv[++i];
    } else if (std::strcmp(argv[i], "--moe-only") == 0) {
      moe_only = true;
    } else if (std::strcmp(argv[i], "--attention-only") == 0) {
      attn_only = true;
    } else if (std::strcmp(argv[i], "--attention-batch-only") == 0) {
      attn_batch_only = true;
    } else if (std::strcmp(argv[i], "--attn-depth") == 0 && i + 1 < argc) {
      attn.depth = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--attn-batch") == 0 && i + 1 < argc) {
      attn.batch = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--attn-kv") == 0 && i + 1 < argc) {
      attn.kv = argv[++i];
    } else if (std::strcmp(argv[i], "--attn-shape") == 0 && i + 1 < argc) {
      attn.shape = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--sample-only") == 0) {
      sample_only = true;
    } else {
      std::fprintf(
          stderr,
          "usage: hearth-cuda-bench [--dtypes F16,Q4_0,...] [--batch-only] "
          "[--batch-sizes 32,64] [--batch-shapes 11008x4096] "
          "[--moe-only] [--attention-only [--attn-depth D] [--attn-kv f16|q8_0] "
          "[--attn-shape 0|1|2|3]] [--attention-batch-only [--attn-batch B] [--attn-depth D] "
          "[--attn-kv ...] [--attn-shape ...]] [--sample-only]\n");
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "cuda-bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cublasHandle_t blas;
  cublasCreate(&blas);

  // Copy bandwidth: 1 GiB device-to-device by an SM copy kernel, bytes read + written.
  const size_t copy_bytes = size_t(1) << 30;
  void *ca = nullptr, *cb = nullptr;
  if (!ok(cudaMalloc(&ca, copy_bytes), "malloc") || !ok(cudaMalloc(&cb, copy_bytes), "malloc"))
    return 1;
  cudaMemsetAsync(ca, 1, copy_bytes, s);
  const double copy_s = time_graph(s, 4, [&] {
    for (int i = 0; i < 4; ++i)
      cuda::launch_copy16(static_cast<float*>(cb), static_cast<const float*>(ca),
                          int64_t(copy_bytes / 4), s);
  });
  const double copy_gbs = 2.0 * double(copy_bytes) / copy_s / 1e9;
  cudaFree(ca);
  cudaFree(cb);
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  std::printf("copy bandwidth (read+write): %.0f GB/s\n", copy_gbs);

  if (moe_only || attn_only || attn_batch_only || sample_only) {
    const bool good = moe_only          ? cuda_bench::moe_decode_table(s, only)
                      : attn_only       ? cuda_bench::decode_attention_table(s, copy_gbs, attn)
                      : attn_batch_only ? cuda_bench::batch_attention_table(s, copy_gbs, attn)
                                        : cuda_bench::sample_pick_table(s);
    cublasDestroy(blas);
    cudaStreamDestroy(s);
    return good ? 0 : 1;
  }
  std::vector<std::string> table;
  char buf[256];
  for (DType t : dtypes) {
    if (batch_only || (only && !std::strstr(only, dtype_name(t)))) continue;
    for (const auto& sh : shapes) {
      const int64_t rows = sh[0], cols = sh[1];
      cuda_bench::WeightReplicas rep;
      float *x = nullptr, *y = nullptr;
      const bool good =
          rep.make(t, rows, cols, s) &&
          ok(cudaMalloc(reinterpret_cast<void**>(&x), size_t(cols) * 512 * 4), "malloc x") &&
          ok(cudaMalloc(reinterpret_cast<void**>(&y), size_t(rows) * 512 * 4), "malloc y");
      if (!good) return 1;
      cuda::launch_fill(x, 0.5f, cols * 512, s);
      const std::vector<cuda::DeviceWeight>& ws = rep.w;
      const int replicas = rep.count();
      const uint64_t raw = rep.raw;
      const int launches = std::max(replicas, 64);
      // Quantized dtypes quantize x inside each launch_matmul (the backend does it once per x).
      const size_t wsb1 = cuda::matmul_workspace_bytes(ws[0], 1);
      void* work1 = nullptr;
      if (wsb1 && !ok(cudaMalloc(&work1, wsb1), "malloc workspace")) return 1;
      const double gemv_s = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i)
          cuda::launch_matmul(ws[size_t(i % replicas)], x, 1, y, work1, wsb1, blas, s);
      });
      // The int8 GEMVs once more with their rows loaded after the PDL wait (GemvWeights): the
      // same quantize + GEMV launches, so the two columns differ by the weights' copy ahead.
      double after_s = 0;
      if (cuda::uses_int8_gemv(t)) {
        after_s = time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i) {
            cuda::QuantizedActs xa;
            cuda::launch_quantize_acts(x, 1, cols, work1, &xa, s);
            const cuda::GemvJob job{ws[size_t(i % replicas)], y, nullptr};
            cuda::launch_gemv_int8_multi(&job, 1, xa, s, cuda::GemvWeights::kLoadedAfterWait);
          }
        });
      }
      cudaFree(work1);
      const double gbs = double(raw) / gemv_s / 1e9;
      // Prefill: T = 512 through the dequantize + tensor-core GEMM path.
      const size_t wsb = cuda::matmul_workspace_bytes(ws[0], 512);
      void* work = nullptr;
      if (wsb) cudaMalloc(&work, wsb);
      const double gemm_s = time_graph(s, 8, [&] {
        for (int i = 0; i < 8; ++i)
          cuda::launch_matmul(ws[size_t(i % replicas)], x, 512, y, work, wsb, blas, s);
      });
      const double tflops = 2.0 * double(rows) * double(cols) * 512 / gemm_s / 1e12;
      const cudaError_t err = cudaStreamSynchronize(s);
      std::snprintf(
          buf, sizeof buf,
          "%-5s %5lldx%-5lld %8.1f MB %8.2f us %7.0f GB/s %5.1f%% (after wait %6.2f us) | pp512 "
          "%7.1f us %6.1f TFLOP/s%s",
          dtype_name(t), (long long)rows, (long long)cols, double(raw) / 1e6, gemv_s * 1e6, gbs,
          100.0 * gbs / copy_gbs, after_s * 1e6, gemm_s * 1e6, tflops,
          err == cudaSuccess ? "" : " ERROR");
      std::printf("%s\n", buf);
      table.push_back(buf);
      cudaFree(work);
      cudaFree(x);
      cudaFree(y);
      if (err != cudaSuccess) {
        std::fprintf(stderr, "cuda-bench: %s\n", cudaGetErrorString(err));
        return 1;
      }
    }
  }
  std::printf("\n== GEMV (T=1) weight-read bandwidth vs copy %.0f GB/s (r+w) ==\n", copy_gbs);
  for (const auto& l : table) std::printf("%s\n", l.c_str());
  if (!cuda_bench::batch_matmul_table(s, blas, only, copy_gbs, batch_sizes, batch_shapes)) return 1;
  if (!batch_only && !cuda_bench::moe_decode_table(s, only)) return 1;
  if (!batch_only && !cuda_bench::decode_attention_table(s, copy_gbs, attn)) return 1;
  if (batch_only) {
    cublasDestroy(blas);
    cudaStreamDestroy(s);
    return 0;
  }

  // Prefill attention, llama2-7b layer (32 heads x 128, 512 causal queries at pos0 0): the
  // the backend's dispatch (the tensor-core kernel, q/k/p/v as fp16 hi + lo).
  {
    const int64_t T = 512, H = 32, HD = 128;
    const size_t n = size_t(T * H * HD);
    float *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    if (!ok(cudaMalloc(reinterpret_cast<void**>(&q), n * 4), "malloc q") ||
        !ok(cudaMalloc(reinterpret_cast<void**>(&k), n * 4), "malloc k") ||
        !ok(cudaMalloc(reinterpret_cast<void**>(&v), n * 4), "malloc v") ||
        !ok(cudaMalloc(reinterpret_cast<void**>(&o), n * 4), "malloc o"))
      return 1;
    cuda::launch_fill(q, 0.3f, int64_t(n), s);
    cuda::launch_fill(k, -0.2f, int64_t(n), s);
    cuda::launch_fill(v, 0.7f, int64_t(n), s);
    const float scale = 1.f / std::sqrt(float(HD));
    const double flop = 4.0 * double(H) * double(HD) * double(T) * double(T + 1) / 2;
    std::printf("\n== prefill attention, %lld heads x %lld, %lld causal tokens ==\n", (long long)H,
                (long long)HD, (long long)T);
    const double sec = time_graph(s, 8, [&] {
      for (int i = 0; i < 8; ++i)
        cuda::launch_attention(q, k, v, o, T, 0, nullptr, T, H, H, HD, scale, nullptr, s);
    });
    const cudaError_t err = cudaStreamSynchronize(s);
    std::printf("attention pp512 %-20s %8.1f us %6.1f TFLOP/s  (x32 layers: %.2f ms)%s\n",
                "default dispatch", sec * 1e6, flop / sec / 1e12, 32 * sec * 1e3,
                err == cudaSuccess ? "" : " ERROR");
    if (err != cudaSuccess) return 1;
    if (!only || std::strstr(only, "F16")) {
      std::printf(
          "\n== F16 prefill GEMM with an FP8 correction pass (errors vs two fp16 passes) ==\n");
      for (const auto& sh : shapes)
        if (!fp8_gemm_line(s, blas, sh[0], sh[1])) return 1;
    }
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
  }
  cublasDestroy(blas);
  cudaStreamDestroy(s);
  return 0;
}
