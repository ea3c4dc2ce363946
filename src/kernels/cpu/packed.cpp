// The packed-weight driver: asks the active table for a dtype's PackedLayout, packs matrices at
// load, and runs them: activations are quantized once per call by the layout's quantizer (Q8_0
// rounding, split into int8 / scales / sums), then row groups go out dynamically in L2 chunks.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels {

namespace {

const PackedLayout* layout_for(DType t) {
  return active_kernel_table().of(t).packed;
}

constexpr uint64_t kChunkBytes = 96u << 10;  // weight bytes per work item: stays in L2 per tile

struct ActScratch {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s;
};

ActScratch& act_scratch() {
  thread_local ActScratch s;
  return s;
}

struct UnpackRows {
  const PackedLayout* layout;
  const uint8_t* packed;
};

// RowSource over a packed matrix: r0 is a multiple of group_rows and d is too (can_pack).
void fill_unpacked(const void* ctx, int64_t r0, int64_t rows, int64_t n, float* out) {
  const auto* c = static_cast<const UnpackRows*>(ctx);
  const int64_t g = c->layout->group_rows;
  for (int64_t i = 0; i < rows; i += g)
    c->layout->unpack_rows(c->packed, (r0 + i) / g, n, out + i * n);
}

}  // namespace

std::optional<uint64_t> packed_size(DType t, int64_t d, int64_t n) {
  const PackedLayout* l = layout_for(t);
  if (!l || d <= 0 || n <= 0 || !l->can_pack(d, n)) return std::nullopt;
  return l->bytes(d, n);
}

int packed_layout_version(DType t) {
  const PackedLayout* l = layout_for(t);
  return l ? l->version : 0;
}

std::string packed_layouts_signature() {
  const KernelTable& table = active_kernel_table();
  std::string sig = table.name;
  for (uint32_t id = 0; id < uint32_t(kMaxTypeId); ++id)
    if (const PackedLayout* l = table.types[id].packed)
      sig += std::string(":") + std::to_string(id) + "v" + std::to_string(l->version);
  return sig;
}

void pack_weight(const TensorView& w, uint8_t* dst, ThreadPool& pool) {
  const PackedLayout* l = layout_for(w.dtype);
  if (!l || !l->can_pack(w.rows(), w.cols()))
    throw std::invalid_argument("pack_weight: no packed layout for " + w.name);
  const int64_t groups = w.rows() / l->group_rows;
  pool.parallel_for(groups, 1,
                    [&](int64_t g0, int64_t g1) { l->pack(w.data, dst, g0, g1, w.cols()); });
}

void matmul_packed(DType t, const uint8_t* packed, int64_t d, int64_t n, const float* x,
                   int64_t n_tokens, float* y, ThreadPool& pool) {
  const PackedLayout* l = layout_for(t);
  if (!l || !l->can_pack(d, n)) throw std::invalid_argument("matmul_packed: no packed layout");
  if (n_tokens <= 0) return;
  if (n_tokens >= prefill_min_tokens(t) && l->unpack_rows &&
      kRowSourceMaxGroup % l->group_rows == 0) {
    // Prefill: the matrix engine reads the rows back through unpack_rows, so the source file's
    // pages stay untouched (only the packed copy is resident).
    const PrefillGemm* gemm = prefill_gemm_for(active_kernel_table());
    const std::optional<PrefillPrecision> prec = prefill_precision(t);
    if (gemm && prec) {
      const UnpackRows ctx{l, packed};
      gemm->run(RowSource{fill_unpacked, &ctx, l->group_rows, l, packed}, d, n, *prec, x, n_tokens,
                y, d, pool);
      return;
    }
  }
  PackedActivations act{nullptr, nullptr, nullptr, n_tokens, x};
  if (l->quantize) {
    const int64_t nb = n / kQK32;
    ActScratch& a = act_scratch();
    a.q.resize(size_t(n_tokens * n));
    a.d.resize(size_t(n_tokens * nb));
    a.s.resize(size_t(n_tokens * nb));
    auto quantize = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        l->quantize(x + t * n, n, &a.q[size_t(t * n)], &a.d[size_t(t * nb)], &a.s[size_t(t * nb)]);
    };
    // One token is a few microseconds: only prefill is worth a fork-join.
    if (n_tokens >= 4)
      pool.parallel_for(n_tokens, 2, quantize);
    else
      quantize(0, n_tokens);
    act = PackedActivations{a.q.data(), a.d.data(), a.s.data(), n_tokens, x};
  }
  const int64_t groups = d / l->group_rows;
  const uint64_t group_bytes = l->bytes(l->group_rows, n);
  int64_t per_chunk =
      std::max<int64_t>(1, int64_t(kChunkBytes / std::max<uint64_t>(group_bytes, 1)));
  // At least ~8 chunks per thread so a slow thread (shared core) does not hold the others up.
  per_chunk = std::min(per_chunk, std::max<int64_t>(1, groups / (int64_t(pool.size()) * 8)));
  const int64_t n_chunks = (groups + per_chunk - 1) / per_chunk;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      const int64_t g0 = c * per_chunk, g1 = std::min(groups, g0 + per_chunk);
      l->gemm(packed, g0, g1, n, act, y, d);
    }
  });
}

}  // namespace hearth::kernels
