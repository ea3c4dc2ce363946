// The CPU matmul driver: quantizes X once into the weight's vec-dot type, then streams weight
// rows in chunks handed out dynamically to the pool's threads; each chunk's rows are dotted
// against tiles of tokens so a prefill reads every weight byte from memory once per call.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace hearth::kernels {

namespace {

constexpr int kTokenTile = 16;               // tokens per kernel call (activations stay in L1/L2)
constexpr uint64_t kChunkBytes = 64u << 10;  // weight bytes per chunk: stays in L2 over tiles
constexpr int64_t kChunksPerThread = 8;      // enough chunks that nobody waits on a straggler

// Reused across calls on the same caller thread: decode calls matmul hundreds of times a token.
std::vector<uint8_t>& activation_scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

void matmul_with_table(const KernelTable& table, const TensorView& w, const float* x,
                       int64_t n_tokens, float* y, ThreadPool& pool) {
  const int64_t d = w.rows(), n = w.cols();
  const TypeKernels& k = table.of(w.dtype);
  if (!k.dot)
    throw std::invalid_argument(std::string("matmul: no kernel for ") + dtype_name(w.dtype));
  if (d <= 0 || n_tokens <= 0) return;

  // X -> activation rows in the kernel's format, once per call.
  const void* xq = x;
  uint64_t x_stride = uint64_t(n) * sizeof(float);
  if (k.act_type != DType::F32) {
    const auto act_bytes = row_bytes(k.act_type, uint64_t(n));
    if (!act_bytes)
      throw std::invalid_argument("matmul: row length not a multiple of the block size");
    x_stride = *act_bytes;
    std::vector<uint8_t>& buf = activation_scratch();
    buf.resize(x_stride * uint64_t(n_tokens));
    uint8_t* out = buf.data();
    const DType act = k.act_type;
    pool.parallel_for(n_tokens, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        (void)quantize_row(act, x + t * n, out + uint64_t(t) * x_stride, n);
    });
    xq = out;
  }

  const uint64_t w_row_bytes = w.row_stride_bytes();
  const int threads = pool.size();
  int64_t chunk_rows =
      std::max<int64_t>(1, int64_t(kChunkBytes / std::max<uint64_t>(1, w_row_bytes)));
  chunk_rows =
      std::min(chunk_rows, std::max<int64_t>(1, d / (int64_t(threads) * kChunksPerThread)));
  const int64_t n_chunks = (d + chunk_rows - 1) / chunk_rows;
  std::atomic<int64_t> next{0};
  const auto* xb = static_cast<const uint8_t*>(xq);

  pool.run([&](int, int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      const int64_t r0 = c * chunk_rows, r1 = std::min(d, r0 + chunk_rows);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
        const int nt = int(std::min<int64_t>(kTokenTile, n_tokens - t0));
        for (int64_t r = r0; r < r1; ++r)
          k.dot(n, w.row(r), xb + uint64_t(t0) * x_stride, x_stride, nt, y + t0 * d + r, d);
      }
    }
  });
}

namespace {

struct DequantRows {
  const TensorView* w;
  DequantizeFn dequantize;
};

void fill_dequantized(const void* ctx, int64_t r0, int64_t rows, int64_t n, float* out) {
  const auto* c = static_cast<const DequantRows*>(ctx);
  for (int64_t i = 0; i < rows; ++i) c->dequantize(c->w->row(r0 + i), out + i * n, n);
}

}  // namespace

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const MatrixEngineOptions& engine) {
  const KernelTable& table = active_kernel_table();
  // Prefill: the matrix engine, when there is one, the options allow it and the dtype's
  // precision does.
  const std::optional<ChosenPrefillGemm> gemm =
      choose_prefill_gemm(table, w.dtype, n_tokens, engine);
  const TypeKernels& k = table.of(w.dtype);
  if (gemm && k.dequantize && w.rows() > 0 && w.cols() > 0) {
    const DequantRows ctx{&w, k.dequantize};
    gemm->gemm->run(RowSource{fill_dequantized, &ctx, 1}, w.rows(), w.cols(), gemm->precision, x,
                    n_tokens, y, w.rows(), pool);
    return;
  }
  matmul_with_table(table, w, x, n_tokens, y, pool);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const TypeKernels& k = active_kernel_table().of(t);
  if (!k.dequantize)
    throw std::invalid_argument(std::string("dequantize_row: no kernel for ") + dtype_name(t));
  k.dequantize(src, dst, n);
}

}  // namespace hearth::kernels
