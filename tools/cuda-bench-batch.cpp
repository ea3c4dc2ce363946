// The batched decode matmul table of hearth-cuda-bench (cuda-bench-batch.h). Weights rotate over
// replicas larger than L2, x is quantized once per B outside the timing (the backend quantizes
// in the producer's epilogue).
#include "cuda-bench-batch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda-bench-util.h"
#include "kernels/cuda/decode-batch.h"

namespace hearth::cuda_bench {

namespace {

// Whether `item` is one of the comma-separated entries of `list` (null: every item is).
bool listed(const char* list, const std::string& item) {
  if (!list) return true;
  const std::string l = std::string(",") + list + ",";
  return l.find("," + item + ",") != std::string::npos;
}

}  // namespace

bool batch_matmul_table(cudaStream_t s, cublasHandle_t blas, const char* only, double copy_gbs,
                        const char* batch_list, const char* shape_list) {
  const DType dtypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K};
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  // Up to a prefill pass and beyond (the GEMM columns: how the fp16 GEMM's rate grows with the
  // pass's tokens; 1024 and 2048 only when listed with --batch-sizes).
  const int64_t batches[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 256, 512, 1024, 2048};
  constexpr int64_t kMaxB = 2048;
  std::printf("\n== batched decode matmul: weight GB/s (vs copy %.0f GB/s r+w) and TOPS ==\n",
              copy_gbs);
  std::printf(
      "%-5s %-11s %4s | %9s %8s %7s | %9s %7s | %9s %7s (prefill GEMM path; then with W's "
      "fp16 copy resident)\n",
      "type", "shape", "B", "decode us", "GB/s", "TOPS", "gemm us", "TOPS", "f16 W us", "TOPS");
  for (DType t : dtypes) {
    if (only && !std::strstr(only, dtype_name(t))) continue;
    for (const auto& sh : shapes) {
      const int64_t rows = sh[0], cols = sh[1];
      if (!listed(shape_list, std::to_string(rows) + "x" + std::to_string(cols))) continue;
      WeightReplicas rep;
      float *x = nullptr, *y = nullptr;
      void *xq = nullptr, *xh = nullptr, *ws = nullptr, *gemm_ws = nullptr;
      const cuda::DeviceWeight shape_w = cuda::make_device_weight(t, rows, cols, nullptr);
      const cuda::GemvJob shape_job{shape_w, nullptr, nullptr};
      size_t ws_bytes = 256, gemm_bytes = 256;
      for (int64_t B : batches) {
        ws_bytes = std::max(ws_bytes, cuda::matmul_batch_workspace_bytes(&shape_job, 1, B));
        gemm_bytes = std::max(gemm_bytes, cuda::matmul_workspace_bytes(shape_w, B));
      }
      const bool good =
          rep.make(t, rows, cols, s) &&
          ok(cudaMalloc(reinterpret_cast<void**>(&x), size_t(kMaxB * cols) * 4), "x") &&
          ok(cudaMalloc(reinterpret_cast<void**>(&y), size_t(kMaxB * rows) * 4), "y") &&
          ok(cudaMalloc(&xq, cuda::quantized_acts_bytes(kMaxB, cols)), "xq") &&
          ok(cudaMalloc(&xh, cuda::batch_x_half_bytes(kMaxB, cols)), "xh") &&
          ok(cudaMalloc(&ws, ws_bytes), "ws") && ok(cudaMalloc(&gemm_ws, gemm_bytes), "gemm");
      if (!good) return false;
      cuda::launch_fill(x, 0.5f, kMaxB * cols, s);
      const std::vector<cuda::DeviceWeight>& w = rep.w;
      const int replicas = rep.count();
      // Each replica's fp16 copy (DeviceWeight::w16), for the resident-copy GEMM column.
      std::vector<cuda::DeviceWeight> w_half = w;
      std::vector<void*> halves;
      for (cuda::DeviceWeight& h : w_half) {
        void* p = nullptr;
        if (!ok(cudaMalloc(&p, size_t(rows * cols) * 2), "fp16 copy") ||
            !ok(cuda::launch_weight_half_copy(h, p, s), "fp16 copy"))
          return false;
        halves.push_back(p);
        h.w16 = static_cast<const uint16_t*>(p);
      }
      const uint64_t raw = rep.raw;
      const int launches = std::max(replicas, 32);
      for (int64_t B : batches) {
        if (!listed(batch_list, std::to_string(B)) || (!batch_list && B > 512)) continue;
        // The backend's choice per B: the GEMV, the int8 batched matmul, or its fp16 form (x
        // converted once here; the backend converts it once per matmul).
        cuda::QuantizedActs xa;
        cudaError_t err = cuda::launch_quantize_acts(x, B, cols, xq, &xa, s);
        const bool half = B >= cuda::kMatmulBatchHalfMinTokens;
        const bool batched = B <= cuda::kMatmulBatchMaxTokens;
        if (half && batched && err == cudaSuccess)
          err = cuda::launch_batch_x_half(x, B, cols, xh, s);
        const double dec_s = !batched ? 0.0 : time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i) {
            const cuda::GemvJob job{w[size_t(i % replicas)], y, nullptr};
            if (B <= cuda::kGemvMaxTokens)
              cuda::launch_gemv_int8_multi(&job, 1, xa, s);
            else if (half)
              cuda::launch_matmul_batch_half(&job, 1, xh, B, cols, ws, ws_bytes, s);
            else
              cuda::launch_matmul_batch(&job, 1, xa, ws, ws_bytes, s);
          }
        });
        const double streamed_s = !half || !batched ? 0.0 : time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i) {
            const cuda::GemvJob job{w[size_t(i % replicas)], y, nullptr};
            cuda::launch_matmul_batch_half_streamed(&job, 1, xh, B, cols, ws, ws_bytes, s);
          }
        });
        const cuda::GemvJob tma_job{w[0], y, nullptr};
        const bool tma = half && cuda::matmul_batch_tma_takes(&tma_job, 1, B, cols);
        const double tma_s = !tma ? 0.0 : time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i) {
            const cuda::GemvJob job{w[size_t(i % replicas)], y, nullptr};
            cuda::launch_matmul_batch_half_tma(&job, 1, xh, B, cols, s);
          }
        });
        const double staged_s = !half || !batched ? 0.0 : time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i) {
            const cuda::GemvJob job{w[size_t(i % replicas)], y, nullptr};
            cuda::launch_matmul_batch_half_staged(&job, 1, xh, B, cols, ws, ws_bytes, s);
          }
        });
        const double gemm_s = time_graph(s, 8, [&] {
          for (int i = 0; i < 8; ++i)
            cuda::launch_matmul(w[size_t(i % replicas)], x, B, y, gemm_ws, gemm_bytes, blas, s);
        });
        const double half_s = B <= cuda::kGemvMaxTokens ? 0.0 : time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i)
            cuda::launch_matmul(w_half[size_t(i % replicas)], x, B, y, gemm_ws, gemm_bytes, blas,
                                s);
        });
        if (err == cudaSuccess) err = cudaStreamSynchronize(s);
        const double ops = 2.0 * double(rows) * double(cols) * double(B);
        const auto per_s = [](double v, double secs) { return secs > 0 ? v / secs : 0.0; };
        std::printf(
            "%-5s %5lldx%-5lld %4lld | %9.2f %8.0f %7.2f | %9.2f %7.2f | %9.2f %7.2f | staged "
            "%7.2f streamed %7.2f tma %7.2f%s\n",
            dtype_name(t), (long long)rows, (long long)cols, (long long)B, dec_s * 1e6,
            per_s(double(raw), dec_s) / 1e9, per_s(ops, dec_s) / 1e12, gemm_s * 1e6,
            ops / gemm_s / 1e12, half_s * 1e6, per_s(ops, half_s) / 1e12, staged_s * 1e6,
            streamed_s * 1e6, tma_s * 1e6, err == cudaSuccess ? "" : " ERROR");
        if (err != cudaSuccess) {
          std::fprintf(stderr, "cuda-bench: %s\n", cudaGetErrorString(err));
          return false;
        }
      }
      for (void* p : {static_cast<void*>(x), static_cast<void*>(y), xq, xh, ws, gemm_ws})
        cudaFree(p);
      for (void* p : halves) cudaFree(p);
    }
  }
  return true;
}

}  // namespace hearth::cuda_bench
