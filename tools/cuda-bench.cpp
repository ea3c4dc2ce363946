// hearth-cuda-bench: GEMV bandwidth per weight dtype on llama2-7b-sized matrices against a
// device-to-device copy measured in the same run, plus prefill GEMM (T=512) throughput.
// Weights rotate over replicas larger than L2 so the numbers are HBM, not cache. Add a dtype or
// shape in the tables at the top of main().
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../tests/unit/cuda/random-weights.h"
#include "kernels/cuda/cuda-ops.h"

using namespace hearth;

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda-bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per launch of `body` (which enqueues `per_graph` launches), timed over graph replays.
template <class Body>
double time_graph(cudaStream_t s, int per_graph, Body body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  body();
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaGraphLaunch(exec, s);  // warm-up
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms * 1e-3 / per_graph);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(times);
}

}  // namespace

int main() {
  const DType dtypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                          DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                          DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  // HEARTH_BENCH_DTYPES=F16,BF16 limits the table to those dtypes.
  const char* only = std::getenv("HEARTH_BENCH_DTYPES");
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

  std::vector<std::string> table;
  char buf[256];
  for (DType t : dtypes) {
    if (only && !std::strstr(only, dtype_name(t))) continue;
    for (const auto& sh : shapes) {
      const int64_t rows = sh[0], cols = sh[1];
      const uint64_t raw = *row_bytes(t, uint64_t(cols)) * uint64_t(rows);
      const cuda::PackedLayout layout = cuda::packed_layout(t, rows, cols);
      const int replicas = int(std::max<uint64_t>(2, (uint64_t(512) << 20) / raw + 1));
      std::vector<uint8_t> host = test::random_weight_bytes(t, rows, cols, 7);
      uint8_t* raw_dev = nullptr;
      std::vector<uint8_t*> packed(size_t(replicas), nullptr);
      bool good = ok(cudaMalloc(reinterpret_cast<void**>(&raw_dev), raw), "malloc raw");
      for (auto& p : packed)
        good = good && ok(cudaMalloc(reinterpret_cast<void**>(&p), layout.total_bytes), "malloc w");
      float *x = nullptr, *y = nullptr;
      good = good &&
             ok(cudaMalloc(reinterpret_cast<void**>(&x), size_t(cols) * 512 * 4), "malloc x") &&
             ok(cudaMalloc(reinterpret_cast<void**>(&y), size_t(rows) * 512 * 4), "malloc y");
      if (!good) return 1;
      cudaMemcpy(raw_dev, host.data(), raw, cudaMemcpyHostToDevice);
      cuda::launch_repack(t, raw_dev, packed[0], rows, cols, s);
      for (int r = 1; r < replicas; ++r)
        cudaMemcpyAsync(packed[size_t(r)], packed[0], layout.total_bytes, cudaMemcpyDeviceToDevice,
                        s);
      cuda::launch_fill(x, 0.5f, cols * 512, s);
      std::vector<cuda::DeviceWeight> ws;
      for (auto* p : packed) ws.push_back(cuda::make_device_weight(t, rows, cols, p));
      const int launches = std::max(replicas, 64);
      // Quantized dtypes quantize x inside each launch_matmul (the backend does it once per x).
      const size_t wsb1 = cuda::matmul_workspace_bytes(ws[0], 1);
      void* work1 = nullptr;
      if (wsb1 && !ok(cudaMalloc(&work1, wsb1), "malloc workspace")) return 1;
      const double gemv_s = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i)
          cuda::launch_matmul(ws[size_t(i % replicas)], x, 1, y, work1, wsb1, blas, s);
      });
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
          "%-5s %5lldx%-5lld %8.1f MB %8.2f us %7.0f GB/s %5.1f%% | pp512 %7.1f us %6.1f TFLOP/s%s",
          dtype_name(t), (long long)rows, (long long)cols, double(raw) / 1e6, gemv_s * 1e6, gbs,
          100.0 * gbs / copy_gbs, gemm_s * 1e6, tflops, err == cudaSuccess ? "" : " ERROR");
      std::printf("%s\n", buf);
      table.push_back(buf);
      cudaFree(work);
      cudaFree(raw_dev);
      for (auto* p : packed) cudaFree(p);
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
  cublasDestroy(blas);
  cudaStreamDestroy(s);
  return 0;
}
