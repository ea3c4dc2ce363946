// hearth-cuda-gemm-probe: what cuBLASLt offers for the prefill GEMM shapes of a llama2-7b layer
// at T=512 — every algorithm its heuristic returns (up to 16), each timed, for fp16, FP8
// e4m3 x e4m3, e4m3 x e5m2 and per-token (outer-vector) scales; single weights, strided batches
// (Q/K/V, gate/up) and concatenated weights; then whether running each weight's pass pair on
// its own stream overlaps them. It decides which GEMM forms matmul.cu should use;
// it is a measuring tool, not part of the engine.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gemm-probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Random bytes that are finite values of the type: fp16 in about [-2, 2], e4m3 / e5m2 without
// their NaN / Inf patterns (zeros would make the tensor cores' power draw, and so the clocks,
// unrepresentative).
std::vector<uint8_t> random_bytes(size_t n, cudaDataType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  if (t == CUDA_R_16F) {
    for (size_t i = 0; i + 1 < n; i += 2) {
      const uint16_t sign = uint16_t(rng() & 1u) << 15;
      const uint16_t exp = uint16_t(12 + rng() % 4) << 10;
      const uint16_t h = uint16_t(sign | exp | (rng() & 0x3ffu));
      v[i] = uint8_t(h & 0xff), v[i + 1] = uint8_t(h >> 8);
    }
  } else {
    for (auto& b : v) {
      uint8_t x = uint8_t(rng());
      if (t == CUDA_R_8F_E4M3 && (x & 0x7f) == 0x7f) x ^= 1;
      if (t == CUDA_R_8F_E5M2 && (x & 0x7c) == 0x7c) x &= 0xf3;
      b = x;
    }
  }
  return v;
}

void* device_random(size_t bytes, cudaDataType t, uint32_t seed) {
  void* p = nullptr;
  if (!ok(cudaMalloc(&p, bytes), "cudaMalloc")) return nullptr;
  // A 16 MiB random pattern repeated: enough variety, fast to make.
  const size_t chunk = std::min<size_t>(bytes, size_t(16) << 20);
  const auto host = random_bytes(chunk, t, seed);
  for (size_t off = 0; off < bytes; off += chunk)
    cudaMemcpy(static_cast<uint8_t*>(p) + off, host.data(), std::min(chunk, bytes - off),
               cudaMemcpyHostToDevice);
  return p;
}

struct Shape {
  const char* name;
  int64_t rows, cols, batch;
};

struct Config {
  const char* name;
  cudaDataType a, b;
  bool outer_vec;  // per-row (A) and per-token (B) float scales instead of scalars
};

size_t elem_bytes(cudaDataType t) {
  return t == CUDA_R_16F ? 2 : t == CUDA_R_32F ? 4 : 1;
}

// Every algorithm the heuristic returns for y[T, rows] += W.x^T (W {rows, cols}, batch copies
// at fixed strides), timed; prints heuristic #0's time and the best one's.
void probe(cublasLtHandle_t lt, const Shape& sh, const Config& c, int64_t T, void* ws,
           size_t ws_bytes, cudaStream_t s) {
  const int64_t rows = sh.rows, cols = sh.cols, nb = sh.batch;
  const size_t w_bytes = size_t(rows * cols) * elem_bytes(c.a);
  const size_t x_bytes = size_t(T * cols) * elem_bytes(c.b);
  void* w = device_random(w_bytes * nb, c.a, 1);
  void* x = device_random(x_bytes * nb, c.b, 2);
  float* y = nullptr;
  float *sa = nullptr, *sb = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&y), size_t(rows * T * nb) * 4);
  cudaMemset(y, 0, size_t(rows * T * nb) * 4);
  const int64_t n_scales = std::max<int64_t>(rows, T) * nb + 16;
  cudaMalloc(reinterpret_cast<void**>(&sa), n_scales * 4);
  cudaMalloc(reinterpret_cast<void**>(&sb), n_scales * 4);
  std::vector<float> ones(n_scales, 1.f);
  cudaMemcpy(sa, ones.data(), n_scales * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(sb, ones.data(), n_scales * 4, cudaMemcpyHostToDevice);

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  const bool fp8 = c.a != CUDA_R_16F;
  if (fp8) {
    const int8_t fast = 1;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    if (c.outer_vec) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    }
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
  }
  cublasLtMatrixLayoutCreate(&la, c.a, uint64_t(cols), uint64_t(rows), cols);
  cublasLtMatrixLayoutCreate(&lb, c.b, uint64_t(cols), uint64_t(T), cols);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, uint64_t(rows), uint64_t(T), rows);
  if (nb > 1) {
    const int32_t count = int32_t(nb);
    const int64_t sa_off = rows * cols, sb_off = T * cols, sc_off = rows * T;
    for (auto [l, off] : {std::pair{la, sa_off}, std::pair{lb, sb_off}, std::pair{lc, sc_off}}) {
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off,
                                       sizeof off);
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t wsb = ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof wsb);
  cublasLtMatmulHeuristicResult_t heur[16] = {};
  int found = 0;
  const cublasStatus_t hst =
      cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, heur, &found);
  const double flops = 2.0 * double(rows) * double(cols) * double(T) * double(nb);
  std::vector<double> us;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const float alpha = 1.f, beta = 1.f;
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &heur[i].algo, ws,
                            ws_bytes, s);
    };
    if (run() != CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(s) != cudaSuccess) {
      us.push_back(-1);
      cudaGetLastError();
      continue;
    }
    for (int r = 0; r < 3; ++r) run();
    cudaEventRecord(e0, s);
    const int reps = 20;
    for (int r = 0; r < reps; ++r) run();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us.push_back(ms * 1e3 / reps);
  }
  int best = -1;
  for (int i = 0; i < int(us.size()); ++i)
    if (us[i] > 0 && (best < 0 || us[i] < us[best])) best = i;
  std::printf("%-10s %-16s T=%lld: ", sh.name, c.name, (long long)T);
  if (hst != CUBLAS_STATUS_SUCCESS || found == 0 || best < 0) {
    std::printf("no algorithm (status %d, found %d)\n", int(hst), found);
  } else {
    std::printf("%2d algos | heuristic #0 %7.1f us (%6.1f TFLOP/s) | best #%-2d %7.1f us (%6.1f) |",
                found, us[0], us[0] > 0 ? flops / us[0] * 1e-6 : 0.0, best, us[best],
                flops / us[best] * 1e-6);
    for (double u : us) std::printf(" %.1f", u);
    std::printf("\n");
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaFree(sa);
  cudaFree(sb);
  cudaGetLastError();
}

// One prefill GEMM of the engine's F16 path as matmul.cu runs it: y = W.x_hi (fp16, beta 0),
// then y += W8.x_lo (e4m3 x e5m2, fast accumulation), each with heuristic #0's algorithm.
struct PassPair {
  int64_t rows, cols, T;
  void *w16, *w8, *x16, *x8, *y;
  float* scale;
  cublasLtMatmulDesc_t op16 = nullptr, op8 = nullptr;
  cublasLtMatrixLayout_t a16, b16, a8, b8, c;
  cublasLtMatmulAlgo_t algo16, algo8;
};

bool make_pair(cublasLtHandle_t lt, PassPair& p, void* x16, void* x8, float* scale,
               size_t ws_bytes) {
  p.w16 = device_random(size_t(p.rows * p.cols) * 2, CUDA_R_16F, 3);
  p.w8 = device_random(size_t(p.rows * p.cols), CUDA_R_8F_E4M3, 4);
  p.x16 = x16, p.x8 = x8, p.scale = scale;
  cudaMalloc(&p.y, size_t(p.rows * p.T) * 4);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescCreate(&p.op16, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatmulDescCreate(&p.op8, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  for (auto op : {p.op16, p.op8}) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  }
  const int8_t fast = 1;
  cublasLtMatmulDescSetAttribute(p.op8, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  cublasLtMatmulDescSetAttribute(p.op8, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale);
  cublasLtMatmulDescSetAttribute(p.op8, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale);
  cublasLtMatrixLayoutCreate(&p.a16, CUDA_R_16F, p.cols, p.rows, p.cols);
  cublasLtMatrixLayoutCreate(&p.b16, CUDA_R_16F, p.cols, p.T, p.cols);
  cublasLtMatrixLayoutCreate(&p.a8, CUDA_R_8F_E4M3, p.cols, p.rows, p.cols);
  cublasLtMatrixLayoutCreate(&p.b8, CUDA_R_8F_E5M2, p.cols, p.T, p.cols);
  cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, p.rows, p.T, p.rows);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t wsb = ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof wsb);
  cublasLtMatmulHeuristicResult_t h16 = {}, h8 = {};
  int n16 = 0, n8 = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, p.op16, p.a16, p.b16, p.c, p.c, pref, 1, &h16, &n16);
  cublasLtMatmulAlgoGetHeuristic(lt, p.op8, p.a8, p.b8, p.c, p.c, pref, 1, &h8, &n8);
  cublasLtMatmulPreferenceDestroy(pref);
  p.algo16 = h16.algo, p.algo8 = h8.algo;
  return n16 > 0 && n8 > 0;
}

void run_pair(cublasLtHandle_t lt, const PassPair& p, void* ws, size_t ws_bytes, cudaStream_t s) {
  const float one = 1.f, zero = 0.f;
  cublasLtMatmul(lt, p.op16, &one, p.w16, p.a16, p.x16, p.b16, &zero, p.y, p.c, p.y, p.c, &p.algo16,
                 ws, ws_bytes, s);
  cublasLtMatmul(lt, p.op8, &one, p.w8, p.a8, p.x8, p.b8, &one, p.y, p.c, p.y, p.c, &p.algo8, ws,
                 ws_bytes, s);
}

// Q/K/V (3 x 4096x4096) and gate/up (2 x 11008x4096) at T=512, each weight's pass pair: one
// stream in order (the engine today), then one stream per weight after a shared start event
// (each with its own workspace), so one weight's FP8 pass can overlap the next one's fp16 pass.
void concurrency(cublasLtHandle_t lt, size_t ws_bytes) {
  const int64_t T = 512;
  struct Group {
    const char* name;
    int64_t rows, cols;
    int n;
  };
  for (const Group& g : {Group{"qkv", 4096, 4096, 3}, Group{"gate+up", 11008, 4096, 2}}) {
    void* x16 = device_random(size_t(T * g.cols) * 2, CUDA_R_16F, 5);
    void* x8 = device_random(size_t(T * g.cols), CUDA_R_8F_E5M2, 6);
    float* scale = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&scale), 4);
    const float sc = 1.f / 2048;
    cudaMemcpy(scale, &sc, 4, cudaMemcpyHostToDevice);
    std::vector<PassPair> pairs(size_t(g.n));
    std::vector<cudaStream_t> st(size_t(g.n));
    std::vector<void*> wss(size_t(g.n));
    std::vector<cudaEvent_t> done(size_t(g.n));
    bool made = true;
    for (int i = 0; i < g.n; ++i) {
      pairs[size_t(i)].rows = g.rows, pairs[size_t(i)].cols = g.cols, pairs[size_t(i)].T = T;
      made = make_pair(lt, pairs[size_t(i)], x16, x8, scale, ws_bytes) && made;
      cudaStreamCreateWithFlags(&st[size_t(i)], cudaStreamNonBlocking);
      cudaMalloc(&wss[size_t(i)], ws_bytes);
      cudaEventCreateWithFlags(&done[size_t(i)], cudaEventDisableTiming);
    }
    cudaEvent_t start_ev, e0, e1;
    cudaEventCreateWithFlags(&start_ev, cudaEventDisableTiming);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto serial = [&] {
      for (const auto& p : pairs) run_pair(lt, p, wss[0], ws_bytes, st[0]);
    };
    auto parallel = [&] {
      cudaEventRecord(start_ev, st[0]);
      for (int i = 1; i < g.n; ++i) cudaStreamWaitEvent(st[size_t(i)], start_ev, 0);
      for (int i = 0; i < g.n; ++i)
        run_pair(lt, pairs[size_t(i)], wss[size_t(i)], ws_bytes, st[size_t(i)]);
      for (int i = 1; i < g.n; ++i) {
        cudaEventRecord(done[size_t(i)], st[size_t(i)]);
        cudaStreamWaitEvent(st[0], done[size_t(i)], 0);
      }
    };
    auto time = [&](auto body) {
      for (int r = 0; r < 3; ++r) body();
      cudaEventRecord(e0, st[0]);
      for (int r = 0; r < 20; ++r) body();
      cudaEventRecord(e1, st[0]);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms * 1e3 / 20;
    };
    if (!made) {
      std::printf("concurrency %s: no algorithm\n", g.name);
      continue;
    }
    const double t_serial = time(serial), t_parallel = time(parallel);
    std::printf(
        "concurrency %-8s T=512 (fp16 + e4m3*e5m2 per weight): one stream %7.1f us | "
        "a stream per weight %7.1f us%s\n",
        g.name, t_serial, t_parallel, cudaGetLastError() == cudaSuccess ? "" : " (CUDA ERROR)");
  }
}

}  // namespace

int main() {
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gemm-probe: no cuBLASLt handle (no GPU?)\n");
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  if (!ok(cudaMalloc(&ws, ws_bytes), "workspace")) return 1;
  const Shape shapes[] = {
      {"q", 4096, 4096, 1},     {"qkv-batch", 4096, 4096, 3}, {"qkv-cat", 12288, 4096, 1},
      {"gate", 11008, 4096, 1}, {"gu-batch", 11008, 4096, 2}, {"gu-cat", 22016, 4096, 1},
      {"down", 4096, 11008, 1},
  };
  const Config configs[] = {
      {"fp16", CUDA_R_16F, CUDA_R_16F, false},
      {"e4m3*e4m3", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, false},
      {"e4m3*e5m2", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, false},
      {"e4m3 outer-vec", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, true},
  };
  // PROBE_ONLY=concurrency: the stream-overlap test alone.
  const char* only = std::getenv("PROBE_ONLY");
  if (!(only && std::string(only) == "concurrency"))
    for (int64_t T : {512, 128})
      for (const auto& sh : shapes)
        for (const auto& c : configs) probe(lt, sh, c, T, ws, ws_bytes, s);
  concurrency(lt, ws_bytes);
  cudaFree(ws);
  cublasLtDestroy(lt);
  return 0;
}
