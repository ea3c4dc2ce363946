// The MoE decode table of hearth-cuda-bench (cuda-bench-moe.h): one layer's gather-GEMVs for one
// token, the f32 path (dq8, f32 x) against the int8 one (x quantized once, outside the timing:
// the backend's rmsnorm writes that form). Each launch of a captured run routes to experts the
// previous ones did not touch (expert j of launch i is (i*k + j) mod n_expert), so with a layer
// over L2's size the routed bytes come from HBM.
#include "cuda-bench-moe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda-bench-util.h"
#include "kernels/cuda/moe-ops.h"

namespace hearth::cuda_bench {

namespace {

struct MoeShape {
  const char* name;
  int64_t n_expert, k, n_embd, n_ff;
};

// Every expert's gate, up and down packed on the device (one random expert copied to all:
// only the bytes' count matters for the timing).
struct MoeLayer {
  std::vector<void*> mem;
  cuda::MoeExperts ex;
  uint64_t gate_up_bytes = 0, down_bytes = 0;  // ggml bytes one slot reads
  ~MoeLayer() {
    for (void* p : mem) cudaFree(p);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    if (!ok(cudaMalloc(&p, bytes), "malloc moe layer")) return nullptr;
    mem.push_back(p);
    return p;
  }
  bool make(DType t, const MoeShape& sh, cudaStream_t s) {
    const int64_t NE = sh.n_expert;
    std::vector<cuda::DeviceWeight> dws(size_t(3 * NE));
    for (int p = 0; p < 3; ++p) {
      const int64_t rows = p == 2 ? sh.n_embd : sh.n_ff, cols = p == 2 ? sh.n_ff : sh.n_embd;
      const uint64_t raw = *row_bytes(t, uint64_t(cols)) * uint64_t(rows);
      (p == 2 ? down_bytes : gate_up_bytes) += raw;
      const size_t packed = cuda::packed_layout(t, rows, cols).total_bytes;
      const std::vector<uint8_t> host = test::random_weight_bytes(t, rows, cols, uint32_t(7 + p));
      auto* raw_dev = static_cast<uint8_t*>(alloc(raw));
      if (!raw_dev) return false;
      cudaMemcpy(raw_dev, host.data(), raw, cudaMemcpyHostToDevice);
      uint8_t* first = nullptr;
      for (int64_t e = 0; e < NE; ++e) {
        auto* w = static_cast<uint8_t*>(alloc(packed));
        if (!w) return false;
        if (e == 0)
          cuda::launch_repack(t, raw_dev, first = w, rows, cols, s);
        else
          cudaMemcpyAsync(w, first, packed, cudaMemcpyDeviceToDevice, s);
        dws[size_t(p * NE + e)] = cuda::make_device_weight(t, rows, cols, w);
      }
    }
    auto* table = static_cast<cuda::DeviceWeight*>(alloc(dws.size() * sizeof(cuda::DeviceWeight)));
    if (!table) return false;
    cudaMemcpy(table, dws.data(), dws.size() * sizeof(cuda::DeviceWeight), cudaMemcpyHostToDevice);
    ex.gate = table, ex.up = table + NE, ex.down = table + 2 * NE;
    ex.dtype = t, ex.n_embd = sh.n_embd, ex.n_ff = sh.n_ff;
    return ok(cudaStreamSynchronize(s), "moe layer");
  }
};

}  // namespace

bool moe_decode_table(cudaStream_t s, const char* only) {
  const DType dtypes[] = {DType::Q4_K, DType::Q4_0, DType::Q8_0};
  const MoeShape shapes[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768},
                             {"mixtral-8x7b", 8, 2, 4096, 14336}};
  std::printf(
      "\n== MoE decode, one layer, T=1: gather-GEMV time and GB/s of the routed bytes ==\n");
  std::printf("%-14s %-5s | %-29s | %-29s\n", "shape", "type", "gate+up: f32 path  int8 path",
              "down: f32 path  int8 path");
  for (const MoeShape& sh : shapes)
    for (DType t : dtypes) {
      if (only && !std::strstr(only, dtype_name(t))) continue;
      MoeLayer layer;
      if (!layer.make(t, sh, s)) return false;
      const int64_t K = sh.k, E = sh.n_embd, F = sh.n_ff;
      // Launches per captured run: two passes over the experts, at least 16.
      const int64_t cycle = sh.n_expert / K;
      const int launches = int(std::max<int64_t>(16, 2 * cycle));
      std::vector<int32_t> ids(size_t(launches * K));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(int64_t(i) % sh.n_expert);
      const std::vector<float> wts(ids.size(), 1.0f / float(K));
      int32_t* d_ids = static_cast<int32_t*>(layer.alloc(ids.size() * 4));
      float* d_wts = static_cast<float*>(layer.alloc(wts.size() * 4));
      float* x = static_cast<float*>(layer.alloc(size_t(E) * 4));
      float* out = static_cast<float*>(layer.alloc(size_t(E) * 4));
      float* h = static_cast<float*>(layer.alloc(size_t(K * F) * 4));
      void* xq = layer.alloc(cuda::quantized_acts_bytes(1, E));
      void* hq = layer.alloc(cuda::quantized_acts_bytes(K, F));
      if (!d_ids || !d_wts || !x || !out || !h || !xq || !hq) return false;
      cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(d_wts, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice);
      cuda::launch_fill(x, 0.5f, E, s);
      cuda::launch_fill(out, 0.0f, E, s);
      cuda::QuantizedActs xa;
      cuda::launch_quantize_acts(x, 1, E, xq, &xa, s);
      cuda::launch_fill(h, 0.25f, K * F, s);
      const bool int8 = cuda::moe_gemv_int8_supports(t, E, F);
      const double f32_gu = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i)
          cuda::launch_moe_gate_up(layer.ex, x, d_ids + i * K, 1, K, 0.f, 0.f, h, s);
      });
      const double f32_dn = time_graph(s, launches, [&] {
        for (int i = 0; i < launches; ++i)
          cuda::launch_moe_down(layer.ex, h, d_ids + i * K, d_wts + i * K, 1, K, out, true, s);
      });
      double i8_gu = 0, i8_dn = 0;
      if (int8) {
        i8_gu = time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i)
            cuda::launch_moe_gate_up_int8(layer.ex, xa, d_ids + i * K, 1, K, 0.f, 0.f, hq, nullptr,
                                          s);
        });
        i8_dn = time_graph(s, launches, [&] {
          for (int i = 0; i < launches; ++i)
            cuda::launch_moe_down_int8(layer.ex, hq, d_ids + i * K, d_wts + i * K, 1, K, out, true,
                                       s);
        });
      }
      const cudaError_t err = cudaStreamSynchronize(s);
      const double gu = double(K * layer.gate_up_bytes), dn = double(K * layer.down_bytes);
      std::printf(
          "%-14s %-5s | %7.2f us %5.0f GB/s %7.2f us %5.0f GB/s | %7.2f us %5.0f GB/s %7.2f us "
          "%5.0f GB/s%s\n",
          sh.name, dtype_name(t), f32_gu * 1e6, gu / f32_gu / 1e9, i8_gu * 1e6,
          int8 ? gu / i8_gu / 1e9 : 0.0, f32_dn * 1e6, dn / f32_dn / 1e9, i8_dn * 1e6,
          int8 ? dn / i8_dn / 1e9 : 0.0, err == cudaSuccess ? "" : " ERROR");
      if (err != cudaSuccess) {
        std::fprintf(stderr, "cuda-bench: %s\n", cudaGetErrorString(err));
        return false;
      }
    }
  return true;
}

}  // namespace hearth::cuda_bench
