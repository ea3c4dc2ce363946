// The packed-weight driver: asks the active table for a dtype's PackedLayout, packs matrices at
// load, and runs them: activations are quantized once per call by the layout's quantizer (Q8_0
// or Q8_K rounding, split into int8 / scales / sums; or int16 codes and scales), then row groups go
// out to the pool's threads: in contiguous ranges for one token, in L2 chunks for more.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
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

// One matrix of a shared call: its groups are [first_group, first_group + groups) of the call's
// concatenated group range.
struct Job {
  const PackedLayout* l;
  const PackedMatmul* m;
  int64_t first_group, groups, max_chunk;
  PackedActivations act;
};

// Runs the call's groups [g0, g1), split where one matrix ends and the next begins.
void run_groups(std::span<const Job> jobs, int64_t g0, int64_t g1, int64_t n) {
  for (const Job& job : jobs) {
    const int64_t a = std::max(g0, job.first_group);
    const int64_t b = std::min(g1, job.first_group + job.groups);
    if (a < b)
      job.l->gemm(job.m->packed, a - job.first_group, b - job.first_group, n, job.act, job.m->y,
                  job.m->d);
  }
}

// Guided hand-out over the groups of all matrices in turn: a grab takes at most an L2 chunk
// and at most 1/(2 x threads) of what is left of its matrix, so the last grabs are single
// groups and the threads reach the join together (the join is where a decode step's idle
// time went: ~9% of it in the pool's wait). A grab never spans two matrices. For prompts: a
// chunk's weights stay in L2 while every token tile passes over them.
void hand_out_chunks(std::span<const Job> jobs, int64_t total, int64_t n, ThreadPool& pool) {
  const int64_t threads = int64_t(pool.size());
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    size_t j = 0;
    int64_t g = next.load(std::memory_order_relaxed);
    for (;;) {
      if (g >= total) return;
      while (g >= jobs[j].first_group + jobs[j].groups) ++j;
      const Job& job = jobs[j];
      const int64_t local = g - job.first_group, left = job.groups - local;
      const int64_t take = std::clamp<int64_t>(left / (2 * threads), 1, job.max_chunk);
      // On failure g is reloaded; it only grows, so j stays valid.
      if (!next.compare_exchange_weak(g, g + take, std::memory_order_relaxed)) continue;
      job.l->gemm(job.m->packed, local, local + take, n, job.act, job.m->y, job.m->d);
      g = next.load(std::memory_order_relaxed);
    }
  });
}

// One token reuses no weight byte, so what matters is how fast each thread streams, and a
// thread streams fastest through one long contiguous range: every jump to a new address
// restarts the hardware prefetcher's ramp. So each thread owns a contiguous share of the call's
// groups and claims it from the front, a quarter of what is left at a time; a thread whose
// share is done steals the back half of the largest unclaimed rest (one jump), so a thread
// the host slows down is still caught up with. Measured (session 12, 2 threads, the 1B
// decode's matmuls in sequence, Q4_0): 24-25 GB/s with the L2-chunk hand-out, 25-27 with
// contiguous shares.
// A range is packed in one atomic word (next in the low half, end in the high half), so the
// owner's claim and a thief's steal cannot both take the same group.
struct alignas(64) OwnedRange {
  std::atomic<uint64_t> word{0};
};

constexpr uint64_t range_word(int64_t next, int64_t end) {
  return uint64_t(end) << 32 | uint64_t(uint32_t(next));
}
constexpr int64_t range_next(uint64_t w) {
  return int64_t(uint32_t(w));
}
constexpr int64_t range_end(uint64_t w) {
  return int64_t(w >> 32);
}

void hand_out_ranges(std::span<const Job> jobs, int64_t total, int64_t n, ThreadPool& pool) {
  const int threads = pool.size();
  thread_local std::vector<OwnedRange> owned_storage;  // the caller's, reached by reference
  if (owned_storage.size() < size_t(threads))
    owned_storage = std::vector<OwnedRange>(size_t(threads));
  std::vector<OwnedRange>& owned = owned_storage;
  for (int t = 0; t < threads; ++t)
    owned[size_t(t)].word.store(range_word(total * t / threads, total * (t + 1) / threads),
                                std::memory_order_relaxed);
  pool.run([&](int t, int) {
    std::atomic<uint64_t>& mine = owned[size_t(t)].word;
    for (;;) {
      uint64_t w = mine.load(std::memory_order_relaxed);
      while (range_next(w) < range_end(w)) {
        const int64_t next = range_next(w), left = range_end(w) - next;
        const int64_t take = std::max<int64_t>(1, left / 4);
        if (!mine.compare_exchange_weak(w, range_word(next + take, range_end(w)),
                                        std::memory_order_relaxed))
          continue;  // w reloaded: a thief took part of the back
        run_groups(jobs, next, next + take, n);
        w = mine.load(std::memory_order_relaxed);
      }
      // Mine is done: steal the back half of the largest unclaimed rest, or stop.
      int victim = -1;
      int64_t most = 1;  // a single group left is its owner's to finish
      for (int v = 0; v < threads; ++v) {
        const uint64_t vw = owned[size_t(v)].word.load(std::memory_order_relaxed);
        if (v != t && range_end(vw) - range_next(vw) > most) {
          most = range_end(vw) - range_next(vw);
          victim = v;
        }
      }
      if (victim < 0) return;
      std::atomic<uint64_t>& theirs = owned[size_t(victim)].word;
      uint64_t vw = theirs.load(std::memory_order_relaxed);
      const int64_t left = range_end(vw) - range_next(vw);
      if (left < 2) continue;  // changed under us: look again
      const int64_t cut = range_end(vw) - left / 2;
      if (!theirs.compare_exchange_strong(vw, range_word(range_next(vw), cut),
                                          std::memory_order_relaxed))
        continue;
      mine.store(range_word(cut, range_end(vw)), std::memory_order_relaxed);
    }
  });
}

// The quantized activations of one call, every distinct input's rows one after another: reused
// across calls on the caller's thread (a decode step must not allocate).
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

namespace {

// Prefill: from prefill_min_tokens on, the matrix engine reads the rows back through
// unpack_rows, so the source file's pages stay untouched (only the packed copy is resident).
// False when this matmul is not one for it (the group kernels run it).
bool run_prefill_gemm(const PackedLayout* l, const PackedMatmul& m, int64_t n, const float* x,
                      int64_t n_tokens, ThreadPool& pool, const MatrixEngineOptions& engine) {
  if (!l->unpack_rows || kRowSourceMaxGroup % l->group_rows != 0) return false;
  const std::optional<ChosenPrefillGemm> gemm =
      choose_prefill_gemm(active_kernel_table(), m.dtype, n_tokens, engine);
  if (!gemm) return false;
  const UnpackRows ctx{l, m.packed};
  gemm->gemm->run(RowSource{fill_unpacked, &ctx, l->group_rows, l, m.packed}, m.d, n,
                  gemm->precision, x, n_tokens, m.y, m.d, pool);
  return true;
}

}  // namespace

void matmul_packed(DType t, const uint8_t* packed, int64_t d, int64_t n, const float* x,
                   int64_t n_tokens, float* y, ThreadPool& pool,
                   const MatrixEngineOptions& engine) {
  const PackedMatmul one{t, packed, d, y};
  matmul_packed_shared({&one, 1}, n, x, n_tokens, pool, engine);
}

void matmul_packed_shared(std::span<const PackedMatmul> mats, int64_t n, const float* x,
                          int64_t n_tokens, ThreadPool& pool, const MatrixEngineOptions& engine) {
  thread_local std::vector<PackedMatmulIn> caller_list;  // reused: no allocation per decode op
  std::vector<PackedMatmulIn>& list = caller_list;
  list.clear();
  for (const PackedMatmul& m : mats) list.push_back({m, x, n_tokens});
  matmul_packed_grouped(list, n, pool, engine);
}

namespace {

// A distinct (quantizer, input) pair of a grouped call and where its rows go in ActScratch.
struct QuantizedInput {
  decltype(PackedLayout::quantize) quantize;
  const float* x;
  int64_t n_tokens, first_row;
};

// Below this many activation elements a call quantizes on the caller: one decode token's rows
// (a few microseconds) cost less than a hand-off to the pool.
constexpr int64_t kParallelQuantizeElements = 16384;

}  // namespace

void matmul_packed_grouped(std::span<const PackedMatmulIn> mats, int64_t n, ThreadPool& pool,
                           const MatrixEngineOptions& engine) {
  if (mats.empty()) return;
  // Reused (a decode step must not allocate). Workers see the caller's lists through these
  // references: naming a thread_local inside the lambda would give each worker its own.
  thread_local std::vector<Job> caller_jobs;
  thread_local std::vector<QuantizedInput> caller_inputs;
  thread_local std::vector<int64_t> caller_input_of;  // per matrix: its QuantizedInput, or -1
  std::vector<Job>& jobs = caller_jobs;
  std::vector<QuantizedInput>& inputs = caller_inputs;
  std::vector<int64_t>& input_of = caller_input_of;
  jobs.clear(), inputs.clear(), input_of.clear();
  for (const PackedMatmulIn& m : mats) {  // validate first: nothing runs on a bad list
    const PackedLayout* l = layout_for(m.m.dtype);
    if (!l || !l->can_pack(m.m.d, n))
      throw std::invalid_argument("matmul_packed: no packed layout");
  }
  // Each matrix the prefill GEMM does not take: its input, quantized once per quantizer
  // however many matrices read it (the same x for Q/K/V; one expert's tokens for its gate/up).
  int64_t rows = 0;
  for (const PackedMatmulIn& m : mats) {
    const PackedLayout* l = layout_for(m.m.dtype);
    if (m.n_tokens <= 0 || run_prefill_gemm(l, m.m, n, m.x, m.n_tokens, pool, engine)) {
      input_of.push_back(-2);  // nothing left to run
      continue;
    }
    if (!l->quantize) {
      input_of.push_back(-1);
      continue;
    }
    int64_t i = int64_t(inputs.size()) - 1;  // the latest first: gate/up pairs are adjacent
    while (i >= 0 && !(inputs[size_t(i)].quantize == l->quantize && inputs[size_t(i)].x == m.x &&
                       inputs[size_t(i)].n_tokens == m.n_tokens))
      --i;
    if (i < 0) {
      i = int64_t(inputs.size());
      inputs.push_back({l->quantize, m.x, m.n_tokens, rows});
      rows += m.n_tokens;
    }
    input_of.push_back(i);
  }
  const int64_t nb = n / kQK32;
  const int64_t qn = kMaxActCodeBytes * n;  // bytes of a row of codes (int8 or int16)
  const int64_t sn = kActSumsPer32 * nb;    // words of a row of sums
  ActScratch& a = act_scratch();
  if (rows > 0) {
    a.q.resize(size_t(rows * qn));
    a.d.resize(size_t(rows * nb));
    a.s.resize(size_t(rows * sn));
    auto quantize = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const QuantizedInput& in = inputs[size_t(i)];
        for (int64_t t = 0; t < in.n_tokens; ++t) {
          const int64_t r = in.first_row + t;
          in.quantize(in.x + t * n, n, &a.q[size_t(r * qn)], &a.d[size_t(r * nb)],
                      &a.s[size_t(r * sn)]);
        }
      }
    };
    // One input of many tokens splits by token; many inputs (experts) split by input.
    if (rows * n < kParallelQuantizeElements) {
      quantize(0, int64_t(inputs.size()));
    } else if (inputs.size() == 1) {
      const QuantizedInput& in = inputs[0];
      pool.parallel_for(in.n_tokens, 2, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          in.quantize(in.x + t * n, n, &a.q[size_t(t * qn)], &a.d[size_t(t * nb)],
                      &a.s[size_t(t * sn)]);
      });
    } else {
      pool.parallel_for(int64_t(inputs.size()), 1, quantize);
    }
  }
  int64_t total = 0;
  bool one_token = true;
  for (size_t k = 0; k < mats.size(); ++k) {
    const int64_t i = input_of[k];
    if (i == -2) continue;
    const PackedMatmulIn& m = mats[k];
    const PackedLayout* l = layout_for(m.m.dtype);
    PackedActivations act{nullptr, nullptr, nullptr, m.n_tokens, m.x};
    if (i >= 0) {
      const int64_t r = inputs[size_t(i)].first_row;
      act = PackedActivations{&a.q[size_t(r * qn)], &a.d[size_t(r * nb)], &a.s[size_t(r * sn)],
                              m.n_tokens, m.x};
    }
    const int64_t groups = m.m.d / l->group_rows;
    const uint64_t group_bytes = l->bytes(l->group_rows, n);
    const int64_t max_chunk =
        std::max<int64_t>(1, int64_t(kChunkBytes / std::max<uint64_t>(group_bytes, 1)));
    jobs.push_back({l, &m.m, total, groups, max_chunk, act});
    total += groups;
    one_token = one_token && m.n_tokens == 1;
  }
  if (total == 0) return;
  if (one_token && total <= int64_t(UINT32_MAX))  // a range word holds 32-bit group indices
    hand_out_ranges(jobs, total, n, pool);
  else
    hand_out_chunks(jobs, total, n, pool);
}

}  // namespace hearth::kernels
