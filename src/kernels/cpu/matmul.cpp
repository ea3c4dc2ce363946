// The CPU matmul driver: quantizes X once into the weight's vec-dot type, then streams weight
// rows in chunks handed out dynamically to the pool's threads; each chunk's rows are dotted
// against tiles of tokens so a prefill reads every weight byte from memory once per call. A
// grouped call does the same for several matrices, each with its own input, in one hand-out.
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
  const MatmulIn one{&w, x, n_tokens, y};
  matmul_grouped_with_table(table, {&one, 1}, pool);
}

namespace {

// A distinct input of a grouped call in its kernel's activation format, at `offset` in the
// scratch; matrices with the same x, token count, row length and activation type share it.
struct TableInput {
  DType act;
  const float* x;
  int64_t n_tokens, n;
  uint64_t stride, offset;
};

// One matrix of a grouped call: its rows in chunks [first_chunk, first_chunk + chunks).
struct TableJob {
  const MatmulIn* m;
  VecDotFn dot;
  const uint8_t* x;
  uint64_t x_stride;
  int64_t chunk_rows, first_chunk, chunks;
};

}  // namespace

void matmul_grouped_with_table(const KernelTable& table, std::span<const MatmulIn> mats,
                               ThreadPool& pool) {
  thread_local std::vector<TableInput> caller_inputs;  // the caller's, reached by reference
  thread_local std::vector<TableJob> caller_jobs;
  thread_local std::vector<size_t> caller_input_of;  // per matrix: its TableInput
  std::vector<TableInput>& inputs = caller_inputs;
  std::vector<TableJob>& jobs = caller_jobs;
  std::vector<size_t>& input_of = caller_input_of;
  inputs.clear(), jobs.clear(), input_of.clear();
  for (const MatmulIn& m : mats) {  // validate first: nothing runs on a bad list
    const TypeKernels& k = table.of(m.w->dtype);
    if (!k.dot)
      throw std::invalid_argument(std::string("matmul: no kernel for ") + dtype_name(m.w->dtype));
    if (k.act_type != DType::F32 && !row_bytes(k.act_type, uint64_t(m.w->cols())))
      throw std::invalid_argument("matmul: row length not a multiple of the block size");
  }
  // X -> activation rows in each kernel's format, once per distinct input.
  uint64_t bytes = 0;
  for (const MatmulIn& m : mats) {
    const DType act = table.of(m.w->dtype).act_type;
    const int64_t n = m.w->cols();
    size_t i = inputs.size();
    while (i > 0 && !(inputs[i - 1].act == act && inputs[i - 1].x == m.x &&
                      inputs[i - 1].n_tokens == m.n_tokens && inputs[i - 1].n == n))
      --i;
    if (i == 0) {
      const uint64_t stride =
          act == DType::F32 ? uint64_t(n) * sizeof(float) : *row_bytes(act, uint64_t(n));
      inputs.push_back({act, m.x, m.n_tokens, n, stride, bytes});
      if (act != DType::F32) bytes += stride * uint64_t(std::max<int64_t>(m.n_tokens, 0));
      i = inputs.size();
    }
    input_of.push_back(i - 1);
  }
  std::vector<uint8_t>& buf = activation_scratch();
  buf.resize(bytes);
  // Rows of all quantized inputs, one range of the pool each.
  int64_t quantized_rows = 0;
  for (const TableInput& in : inputs)
    if (in.act != DType::F32) quantized_rows += std::max<int64_t>(in.n_tokens, 0);
  if (quantized_rows > 0) {
    uint8_t* out = buf.data();
    pool.parallel_for(quantized_rows, 4, [&](int64_t b, int64_t e) {
      int64_t first = 0;  // row index of the current input's first token
      for (const TableInput& in : inputs) {
        if (in.act == DType::F32 || in.n_tokens <= 0) continue;
        const int64_t t0 = std::max(b - first, int64_t(0));
        const int64_t t1 = std::min(e - first, in.n_tokens);
        for (int64_t t = t0; t < t1; ++t)
          (void)quantize_row(in.act, in.x + t * in.n, out + in.offset + uint64_t(t) * in.stride,
                             in.n);
        first += in.n_tokens;
      }
    });
  }

  const int threads = pool.size();
  int64_t total = 0;
  for (size_t j = 0; j < mats.size(); ++j) {
    const MatmulIn& m = mats[j];
    const int64_t d = m.w->rows();
    if (d <= 0 || m.n_tokens <= 0) continue;
    const TableInput& in = inputs[input_of[j]];
    const uint64_t w_row_bytes = m.w->row_stride_bytes();
    int64_t chunk_rows =
        std::max<int64_t>(1, int64_t(kChunkBytes / std::max<uint64_t>(1, w_row_bytes)));
    chunk_rows =
        std::min(chunk_rows, std::max<int64_t>(1, d / (int64_t(threads) * kChunksPerThread)));
    const int64_t chunks = (d + chunk_rows - 1) / chunk_rows;
    const auto* xb =
        in.act == DType::F32 ? reinterpret_cast<const uint8_t*>(m.x) : buf.data() + in.offset;
    jobs.push_back({&m, table.of(m.w->dtype).dot, xb, in.stride, chunk_rows, total, chunks});
    total += chunks;
  }
  if (total == 0) return;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    size_t j = 0;  // chunks are taken in increasing order, so each thread's job index only grows
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= total) return;
      while (c >= jobs[j].first_chunk + jobs[j].chunks) ++j;
      const TableJob& job = jobs[j];
      const TensorView& w = *job.m->w;
      const int64_t d = w.rows(), n = w.cols(), T = job.m->n_tokens;
      const int64_t r0 = (c - job.first_chunk) * job.chunk_rows;
      const int64_t r1 = std::min(d, r0 + job.chunk_rows);
      for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
        const int nt = int(std::min<int64_t>(kTokenTile, T - t0));
        for (int64_t r = r0; r < r1; ++r)
          job.dot(n, w.row(r), job.x + uint64_t(t0) * job.x_stride, job.x_stride, nt,
                  job.m->y + t0 * d + r, d);
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

void matmul_grouped(std::span<const MatmulIn> mats, ThreadPool& pool,
                    const MatrixEngineOptions& engine) {
  const KernelTable& table = active_kernel_table();
  // Prefill: matrices with enough tokens for the matrix engine take it one by one (as matmul
  // would); the rest share one hand-out.
  thread_local std::vector<MatmulIn> caller_rest;
  std::vector<MatmulIn>& rest = caller_rest;
  rest.clear();
  for (const MatmulIn& m : mats) {
    if (choose_prefill_gemm(table, m.w->dtype, m.n_tokens, engine))
      matmul(*m.w, m.x, m.n_tokens, m.y, pool, engine);
    else
      rest.push_back(m);
  }
  matmul_grouped_with_table(table, rest, pool);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const TypeKernels& k = active_kernel_table().of(t);
  if (!k.dequantize)
    throw std::invalid_argument(std::string("dequantize_row: no kernel for ") + dtype_name(t));
  k.dequantize(src, dst, n);
}

}  // namespace hearth::kernels
