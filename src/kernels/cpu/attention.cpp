// Causal multi-head attention over the KV cache (f32, f16, bf16 or q8_0 rows, read in place) on
// the CPU: blocked online softmax, the inner loops from SmallOps (per ISA and row type; a GQA
// group's query heads through one group loop where the table has one). Work is
// cut into jobs (kv heads, query block, key range) taken from a shared counter, largest first, so
// causal prefill does not leave a straggler. A decode step instead gives each thread a contiguous
// range of keys across every kv head (a short context: a range of kv heads too); a decode step
// of several sequences runs them all in one pass, a job per sequence (attention_segments). Sliding
// windows, soft-caps and ring caches (AttentionMask) change which keys a query sees and its scores,
// not the schedule; attention sinks enter only the final normalisation (output_factor).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "kernels/cpu/small-ops.h"

namespace hearth::kernels {

namespace {

constexpr int64_t kKeyBlock = 64;          // keys per softmax block at most (keys_per_block)
constexpr int64_t kMinKeysPerSplit = 256;  // a prefill key split must be worth a merge
// A decode step's key split: its merge is a few hundred floats, against the cache rows it reads.
constexpr int64_t kMinKeysPerDecodeSplit = 32;

struct Shape {
  const float* q;
  const uint8_t* k;
  const uint8_t* v;
  float* out;
  int64_t T, pos0, H, group, hd;
  DType k_type, v_type;
  int64_t k_row, v_row;    // bytes per cache row
  int64_t k_head, v_head;  // bytes per head within a row
  float scale;
  AttentionMask mask;
  KvRowsAhead ahead;  // read a share per key block when the call is one job (ops.h)
  // The keys query token t sees: positions [first_key(t), pos0 + t + 1).
  int64_t first_key(int64_t t) const {
    return mask.window > 0 ? std::max<int64_t>(0, pos0 + t + 1 - mask.window) : 0;
  }
  // Row of position p in the cache (a ring wraps).
  int64_t row(int64_t p) const { return mask.ring_rows > 0 ? p % mask.ring_rows : p; }
};

// One job: query tokens [t0, t1) of kv heads [kvh0, kvh1), keys [k0, k1) (clipped per token by
// causality and the window).
struct Job {
  int64_t kvh0, kvh1, t0, t1, k0, k1, split;
};

// Per-thread scratch, reused across calls: a decode step must not allocate. p: each query row's
// scores over the current key block, then their exponentials; c: its rescale for the block.
struct Scratch {
  std::vector<float> m, l, acc, p, c;
};

// The largest of s[0..n), n >= 1: four running maxima, so no chain waits a compare per key.
float max_of(const float* s, int64_t n) {
  float m[4] = {s[0], s[0], s[0], s[0]};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int i = 0; i < 4; ++i) m[i] = std::max(m[i], s[j + i]);
  for (; j < n; ++j) m[0] = std::max(m[0], s[j]);
  return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

// The two loops for a row type: f32 rows through the f32 entries (element strides), the others
// through their KvRowOps (byte strides). A switch per key block, not per key.
const KvRowOps* typed_rows(const SmallOps& ops, DType t) {
  switch (t) {
    case DType::F16:
      return &ops.f16;
    case DType::BF16:
      return &ops.bf16;
    case DType::Q8_0:
      return &ops.q8_0;
    default:
      return nullptr;
  }
}

// The scores of the g query heads of one kv head (q: g rows of hd, s: g rows s_stride apart):
// typed rows with a group loop read each row once for all g.
void score_group(const SmallOps& ops, DType t, const float* q, int64_t g, const uint8_t* k,
                 int64_t stride, int64_t nk, int64_t hd, float scale, float* s, int64_t s_stride) {
  const KvRowOps* rows = typed_rows(ops, t);
  if (rows && rows->scores_group && g > 1)
    return rows->scores_group(q, g, k, stride, nk, hd, scale, s, s_stride);
  for (int64_t h = 0; h < g; ++h, q += hd, s += s_stride) {
    if (rows)
      rows->scores(q, k, stride, nk, hd, scale, s);
    else
      ops.scores(q, reinterpret_cast<const float*>(k), stride / 4, nk, hd, scale, s);
  }
}

// P.V for the g heads of one kv head: acc g rows of hd, c[h], p g rows p_stride apart.
void accumulate_group(const SmallOps& ops, DType t, float* acc, const float* c, const float* p,
                      int64_t p_stride, int64_t g, const uint8_t* v, int64_t stride, int64_t nk,
                      int64_t hd) {
  const KvRowOps* rows = typed_rows(ops, t);
  if (rows && rows->accumulate_group && g > 1)
    return rows->accumulate_group(acc, c, p, p_stride, g, v, stride, nk, hd);
  for (int64_t h = 0; h < g; ++h, acc += hd, p += p_stride) {
    if (rows)
      rows->accumulate(acc, c[h], p, v, stride, nk, hd);
    else
      ops.accumulate(acc, c[h], p, reinterpret_cast<const float*>(v), stride / 4, nk, hd);
  }
}

// Soft-capping inside the online softmax: the capped scores are what the max, exp and sum see.
// One generic loop for every table (only Gemma 2 pays it).
void cap_scores(float* s, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] * inv);
}

// The factor that turns a row's unnormalised output acc (running max m, sum l) into the
// attention output. A sink (gpt-oss) joins only this final normalisation: with M = max(m, sink),
// out = acc e^(m-M) / (l e^(m-M) + e^(sink-M)), safe whichever of the two is larger.
float output_factor(float m, float l, const float* sinks, int64_t h) {
  if (!sinks) return 1.0f / l;
  const float sink = sinks[h];
  const float top = std::max(m, sink);
  const float c = std::exp(m - top);
  return c / (l * c + std::exp(sink - top));
}

// Reads bytes [from, to) of p, a load per cache line, so a later call finds them in the caches.
// Plain loads, not prefetch instructions: those wait for one of the core's few L1 miss buffers
// each (a burst of them stalled attention as long as a demand miss), while loads that miss
// train the L2 streamer, which then fetches the rest of the range ahead of them.
void read_ahead(const void* p, int64_t from, int64_t to) {
  const auto* b = static_cast<const volatile uint8_t*>(p);
  uint8_t any = 0;
  for (int64_t o = from & ~int64_t(63); o < to; o += 64) any |= b[o];
  // (The loads are volatile; this only keeps their value from looking unused.)
  asm volatile("" : : "r"(any));
}

// A prefetch for each cache line of bytes [0, n) of p: rows a later phase of this job reads. A
// prefetch does not hold up retirement as a load does, though each takes an L1 miss buffer
// (read_ahead): after the in-order loads of a block's K rows have set the L2 streamer going,
// prefetching its V rows and the next block's K rows beat loading them (one core, kjv-13m's
// layer from memory: 201 against 230 us).
void prefetch_rows(const void* p, int64_t n) {
  const auto* b = static_cast<const char*>(p);
  for (int64_t o = 0; o < n; o += 64) __builtin_prefetch(b + o);
}

// Keys per softmax block: their K and V rows (~64 KiB) stay in L1/L2 while every head of the job
// reads them; at least 16 (the scores loops reduce 16 keys at once), at most kKeyBlock.
int64_t keys_per_block(const Shape& sh) {
  return std::clamp<int64_t>((int64_t(64) << 10) / (sh.k_row + sh.v_row) / 16 * 16, 16, kKeyBlock);
}

// The whole rows [block, end) of the cache (a ring never wraps inside a block).
KvRowsAhead block_rows(const Shape& sh, int64_t block, int64_t end) {
  const int64_t r = sh.row(block), n = end - block;
  return {sh.k + r * sh.k_row, sh.v + r * sh.v_row, n * sh.k_row, n * sh.v_row};
}

// Runs one job. Each query row (kv head, token t, head h of the group) keeps a running max m,
// sum l and unnormalised output acc; every key block rescales them once. With `partial` set the
// (m, l, acc) triple is written for the merge; else the normalised row goes to out.
//
// A job of every kv head (decode) reads each block's rows whole and in order before the heads
// take their slices: a head's slice of each row is a strided read that the L2 streamer does not
// follow (10-20 GB/s on one core against 26-38 GB/s in order, Zen 5), so the K rows are loaded
// in order first (plain loads: they train the streamer), the V rows and the next block's K rows
// prefetched while the scores and then P.V run. Every row's scores and softmax come first, then
// every row's P.V, so the V rows have the whole scores phase to arrive.
void run_job(const SmallOps& ops, const Shape& sh, const Job& job, Scratch& sc, float* partial) {
  const int64_t tokens = job.t1 - job.t0, hd = sh.hd;
  const int64_t rows = (job.kvh1 - job.kvh0) * tokens * sh.group;
  sc.m.assign(size_t(rows), -INFINITY);
  sc.l.assign(size_t(rows), 0.0f);
  sc.acc.assign(size_t(rows * hd), 0.0f);
  sc.p.resize(size_t(rows * kKeyBlock));
  sc.c.resize(size_t(rows));
  const bool whole_rows = job.kvh0 == 0 && job.kvh1 * sh.group == sh.H;
  const int64_t block_keys = whole_rows ? keys_per_block(sh) : kKeyBlock;
  const int64_t last_ctx = std::min(job.k1, sh.pos0 + job.t1);   // keys the last token sees
  const int64_t first = std::max(job.k0, sh.first_key(job.t0));  // ... and the first token
  // Read-ahead: the next sequence's rows, a share per key block (rows in this call's order).
  const int64_t span = std::max<int64_t>(1, last_ctx - first);
  // The key range [kb, kb + nk) of token t in [block, block_end), and query row r's index.
  auto keys_of = [&](int64_t t, int64_t block, int64_t block_end, int64_t& kb) {
    kb = std::max(block, sh.first_key(t));
    return std::min(block_end, sh.pos0 + t + 1) - kb;  // causal
  };
  auto row_of = [&](int64_t kvh, int64_t t, int64_t g) {
    return ((kvh - job.kvh0) * tokens + (t - job.t0)) * sh.group + g;
  };
  // The block from `block`: consecutive positions whose rows are consecutive too (a ring wraps
  // between blocks, never inside one).
  auto end_of = [&](int64_t block) {
    const int64_t end = std::min(last_ctx, block + block_keys);
    return sh.mask.ring_rows > 0 ? std::min(end, block + sh.mask.ring_rows - sh.row(block)) : end;
  };
  for (int64_t block = first; block < last_ctx;) {
    const int64_t block_end = end_of(block);
    if (sh.ahead.k) {
      const auto share = [&](int64_t bytes, int64_t at) { return bytes * (at - first) / span; };
      read_ahead(sh.ahead.k, share(sh.ahead.k_bytes, block), share(sh.ahead.k_bytes, block_end));
      read_ahead(sh.ahead.v, share(sh.ahead.v_bytes, block), share(sh.ahead.v_bytes, block_end));
    }
    if (whole_rows) {
      const KvRowsAhead here = block_rows(sh, block, block_end);
      read_ahead(here.k, 0, here.k_bytes);
      prefetch_rows(here.v, here.v_bytes);
    }
    // f(kvh, t, kb, nk) for each (kv head, token) of the job with keys [kb, kb + nk) here.
    auto each_query = [&](auto&& f) {
      for (int64_t kvh = job.kvh0; kvh < job.kvh1; ++kvh)
        for (int64_t t = job.t0; t < job.t1; ++t) {
          int64_t kb = 0;
          const int64_t nk = keys_of(t, block, block_end, kb);
          if (nk > 0) f(kvh, t, kb, nk);
        }
    };
    each_query([&](int64_t kvh, int64_t t, int64_t kb, int64_t nk) {
      const uint8_t* kblk = sh.k + sh.row(kb) * sh.k_row + kvh * sh.k_head;
      score_group(ops, sh.k_type, sh.q + (t * sh.H + kvh * sh.group) * hd, sh.group, kblk, sh.k_row,
                  nk, hd, sh.scale, sc.p.data() + row_of(kvh, t, 0) * kKeyBlock, kKeyBlock);
      for (int64_t g = 0; g < sh.group; ++g) {
        const int64_t r = row_of(kvh, t, g);
        float* s = sc.p.data() + r * kKeyBlock;
        if (sh.mask.softcap > 0) cap_scores(s, nk, sh.mask.softcap);
        const float mx = max_of(s, nk);
        const float m_old = sc.m[size_t(r)];
        const float m_new = std::max(m_old, mx);
        const float c = m_old == -INFINITY ? 0.0f : std::exp(m_old - m_new);
        const float sum = ops.exp_sum(s, nk, m_new);
        sc.l[size_t(r)] = sc.l[size_t(r)] * c + sum;
        sc.m[size_t(r)] = m_new;
        sc.c[size_t(r)] = c;
      }
    });
    if (whole_rows && block_end < last_ctx) {
      const KvRowsAhead next = block_rows(sh, block_end, end_of(block_end));
      prefetch_rows(next.k, next.k_bytes);
    }
    each_query([&](int64_t kvh, int64_t t, int64_t kb, int64_t nk) {
      const uint8_t* vblk = sh.v + sh.row(kb) * sh.v_row + kvh * sh.v_head;
      const int64_t r = row_of(kvh, t, 0);
      accumulate_group(ops, sh.v_type, sc.acc.data() + r * hd, sc.c.data() + r,
                       sc.p.data() + r * kKeyBlock, kKeyBlock, sh.group, vblk, sh.v_row, nk, hd);
    });
    block = block_end;
  }
  for (int64_t kvh = job.kvh0; kvh < job.kvh1; ++kvh) {
    for (int64_t t = job.t0; t < job.t1; ++t) {
      for (int64_t g = 0; g < sh.group; ++g) {
        const int64_t h = kvh * sh.group + g, r = row_of(kvh, t, g);
        const float* a = sc.acc.data() + r * hd;
        if (partial) {  // [split][t][h] x (m, l, acc[hd])
          float* p = partial + ((job.split * sh.T + t) * sh.H + h) * (hd + 2);
          p[0] = sc.m[size_t(r)];
          p[1] = sc.l[size_t(r)];
          std::copy(a, a + hd, p + 2);
        } else {
          float* o = sh.out + (t * sh.H + h) * hd;
          const float inv = output_factor(sc.m[size_t(r)], sc.l[size_t(r)], sh.mask.sinks, h);
          for (int64_t i = 0; i < hd; ++i) o[i] = a[i] * inv;
        }
      }
    }
  }
}

Shape make_shape(const float* q, const KvRows& k_cache, const KvRows& v_cache, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale, const AttentionMask& mask) {
  const int64_t kv_dim = n_kv_heads * head_dim;
  return Shape{q,
               static_cast<const uint8_t*>(k_cache.data),
               static_cast<const uint8_t*>(v_cache.data),
               out,
               n_tokens,
               pos0,
               n_heads,
               n_heads / n_kv_heads,
               head_dim,
               k_cache.type,
               v_cache.type,
               kv_row_bytes(k_cache.type, kv_dim),
               kv_row_bytes(v_cache.type, kv_dim),
               kv_row_bytes(k_cache.type, head_dim),
               kv_row_bytes(v_cache.type, head_dim),
               scale,
               mask,
               {}};
}

// The cache bytes a one-token query's attention reads: rows [first key, position] (a ring: all
// the rows it holds).
KvRowsAhead rows_seen(const Shape& sh) {
  const int64_t n_ctx = sh.pos0 + 1;
  int64_t first = sh.first_key(0), rows = n_ctx - first;
  if (sh.mask.ring_rows > 0) first = 0, rows = std::min(n_ctx, sh.mask.ring_rows);
  return {sh.k + first * sh.k_row, sh.v + first * sh.v_row, rows * sh.k_row, rows * sh.v_row};
}

}  // namespace

void attention_segments_with(const SmallOps& ops, const float* q,
                             std::span<const AttentionSegment> segs, float* out, int64_t n_heads,
                             int64_t n_kv_heads, int64_t head_dim, float scale,
                             const AttentionMask& mask, ThreadPool& pool) {
  const int64_t n = int64_t(segs.size());
  if (n <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return;
  // A sequence's rows are read whole, in order, by one thread (the L2 streamer runs ahead of
  // them, as for a single sequence's key ranges); kv-head groups only when the sequences are
  // too few to keep every thread busy.
  const int64_t threads = int64_t(pool.size());
  const int64_t groups = n >= 2 * threads ? 1 : std::min(n_kv_heads, (2 * threads + n - 1) / n);
  const int64_t heads_per_job = (n_kv_heads + groups - 1) / groups;
  struct SegJob {
    Job job;
    int64_t seg, keys;
  };
  // Per calling thread and reused, as attention_with's lists.
  thread_local std::vector<Shape> caller_shapes;
  thread_local std::vector<SegJob> caller_jobs;
  std::vector<Shape>& shapes = caller_shapes;
  std::vector<SegJob>& jobs = caller_jobs;
  shapes.clear();
  jobs.clear();
  const int64_t qd = n_heads * head_dim;
  for (int64_t i = 0; i < n; ++i) {
    const AttentionSegment& sg = segs[size_t(i)];
    AttentionMask m = mask;
    m.ring_rows = sg.ring_rows;
    shapes.push_back(make_shape(q + i * qd, sg.k, sg.v, out + i * qd, 1, sg.pos, n_heads,
                                n_kv_heads, head_dim, scale, m));
    const int64_t key0 = shapes.back().first_key(0), n_ctx = sg.pos + 1;
    for (int64_t kvh = 0; kvh < n_kv_heads; kvh += heads_per_job)
      jobs.push_back({{kvh, std::min(n_kv_heads, kvh + heads_per_job), 0, 1, key0, n_ctx, 0},
                      i,
                      (n_ctx - key0) * (std::min(n_kv_heads, kvh + heads_per_job) - kvh)});
  }
  if (threads == 1) {
    // One thread: the sequences in order, each reading the next one's rows on the way (they come
    // from memory, and strided reads do not let the L2 streamer run ahead; kjv-13m, 8 sequences
    // at 256 positions, caches flushed between layers: ~0.75 -> ~0.55-0.65 ms a step).
    for (size_t i = 0; i + 1 < shapes.size(); ++i) shapes[i].ahead = rows_seen(shapes[i + 1]);
  } else {
    // Longest first: the dynamic schedule then ends with short jobs on every thread.
    std::stable_sort(jobs.begin(), jobs.end(),
                     [](const SegJob& a, const SegJob& b) { return a.keys > b.keys; });
  }
  std::atomic<size_t> next{0};
  auto work = [&](int, int) {
    thread_local Scratch sc;
    for (size_t j = next.fetch_add(1); j < jobs.size(); j = next.fetch_add(1))
      run_job(ops, shapes[size_t(jobs[j].seg)], jobs[j].job, sc, nullptr);
  };
  if (jobs.size() == 1 || threads == 1)
    work(0, 1);
  else
    pool.run(work);
}

void attention_with(const SmallOps& ops, const float* q, const float* k_cache, const float* v_cache,
                    float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                    int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool) {
  attention_with(ops, q, KvRows{k_cache, DType::F32}, KvRows{v_cache, DType::F32}, out, n_tokens,
                 pos0, n_heads, n_kv_heads, head_dim, scale, mask, pool);
}

void attention_with(const SmallOps& ops, const float* q, const KvRows& k_cache,
                    const KvRows& v_cache, float* out, int64_t n_tokens, int64_t pos0,
                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                    const AttentionMask& mask, ThreadPool& pool, const KvRowsAhead& ahead) {
  if (n_tokens <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return;
  Shape sh = make_shape(q, k_cache, v_cache, out, n_tokens, pos0, n_heads, n_kv_heads, head_dim,
                        scale, mask);
  // Query blocks: enough rows (tokens x group heads) that a key block loaded once serves many.
  const int64_t qb = std::clamp<int64_t>(32 / sh.group, 1, 16);
  const int64_t n_qblocks = (n_tokens + qb - 1) / qb;
  const int64_t n_ctx = pos0 + n_tokens;
  const int64_t key0 = sh.first_key(0);  // no query sees a key before this (sliding window)
  const int64_t n_keys = n_ctx - key0;
  // Long contexts with few (kv head, query block) jobs split the keys, so every thread has
  // work; the partial softmax states are merged after the run.
  const int64_t want_jobs = 4 * int64_t(pool.size());
  int64_t splits = 1;
  if (n_kv_heads * n_qblocks < want_jobs && pool.size() > 1)
    splits =
        std::clamp<int64_t>(n_keys / kMinKeysPerSplit, 1,
                            (want_jobs + n_kv_heads * n_qblocks - 1) / (n_kv_heads * n_qblocks));
  // One query block (decode, a short batch): the cache is the only large read, and it comes
  // from memory (a step's weights have flushed the caches). Jobs per kv head read one slice of
  // every cache row each, and the threads' reads interleave; one contiguous key range per
  // thread, every kv head, streams the rows in order. Session 13, TinyLlama's 22 layers with the
  // cache flushed before each step, 2 threads, the previous kernel against this one and the
  // 16-key scores together: 0.64-0.65 -> 0.52-0.56 ms a step at 64 positions, 1.42-1.60 ->
  // 1.47-1.58 at 250, 5.66-5.69 -> 4.83-4.90 at 1000.
  const bool key_ranges = n_qblocks == 1 && pool.size() > 1;
  int64_t heads_per_job = pool.size() == 1 && n_qblocks == 1 ? n_kv_heads : 1;
  if (key_ranges) {
    splits = std::clamp<int64_t>(n_keys / kMinKeysPerDecodeSplit, 1, int64_t(pool.size()));
    // Too few keys to give every thread a range (a short context): cut the kv heads too, so
    // the threads still share the cache rows (Llama 2 7B's 32 kv heads at 16 positions, cache
    // flushed: 1.61-1.66 -> 1.13-1.51 ms a step).
    const int64_t head_groups =
        std::clamp<int64_t>((int64_t(pool.size()) + splits - 1) / splits, 1, n_kv_heads);
    heads_per_job = (n_kv_heads + head_groups - 1) / head_groups;
  }
  // Per calling thread and reused: a decode step allocates nothing here after its first call.
  // (Named through references: inside the lambda a thread_local name would mean the worker's.)
  thread_local std::vector<Job> caller_jobs;
  thread_local std::vector<float> caller_partial;
  std::vector<Job>& jobs = caller_jobs;
  std::vector<float>& partial = caller_partial;
  jobs.clear();
  // Later query blocks see more keys: listing them first balances the dynamic schedule.
  for (int64_t b = n_qblocks - 1; b >= 0; --b) {
    const int64_t t0 = b * qb, t1 = std::min(n_tokens, t0 + qb);
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t k0 = key0 + n_keys * s / splits, k1 = key0 + n_keys * (s + 1) / splits;
      for (int64_t kvh = 0; kvh < n_kv_heads; kvh += heads_per_job)
        jobs.push_back({kvh, std::min(n_kv_heads, kvh + heads_per_job), t0, t1, k0, k1, s});
    }
  }
  // Only a call that is one job reads the ahead rows (several jobs would each read them all):
  // a single thread's decode runs every kv head in one job for it.
  if (jobs.size() == 1) sh.ahead = ahead;
  if (splits > 1) partial.resize(size_t(splits * n_tokens * n_heads * (head_dim + 2)));
  float* part = splits > 1 ? partial.data() : nullptr;

  std::atomic<size_t> next{0};
  auto work = [&](int, int) {
    thread_local Scratch sc;
    for (size_t j = next.fetch_add(1); j < jobs.size(); j = next.fetch_add(1))
      run_job(ops, sh, jobs[j], sc, part);
  };
  if (jobs.size() == 1)
    work(0, 1);
  else
    pool.run(work);
  if (splits == 1) return;

  // Merge the splits: rescale each partial to the common max, then normalise.
  const int64_t stride = head_dim + 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float m = -INFINITY;
      for (int64_t s = 0; s < splits; ++s)
        m = std::max(m, partial[size_t(((s * n_tokens + t) * n_heads + h) * stride)]);
      float* o = out + (t * n_heads + h) * head_dim;
      std::fill(o, o + head_dim, 0.0f);
      float l = 0;
      for (int64_t s = 0; s < splits; ++s) {
        const float* p = partial.data() + ((s * n_tokens + t) * n_heads + h) * stride;
        if (p[0] == -INFINITY) continue;  // this split held no key this token may see
        const float c = std::exp(p[0] - m);
        l += p[1] * c;
        for (int64_t i = 0; i < head_dim; ++i) o[i] += p[2 + i] * c;
      }
      const float inv = output_factor(m, l, mask.sinks, h);
      for (int64_t i = 0; i < head_dim; ++i) o[i] *= inv;
    }
  }
}

void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, ThreadPool& pool) {
  attention_with(small_ops(), q, k_cache, v_cache, out, n_tokens, pos0, n_heads, n_kv_heads,
                 head_dim, scale, AttentionMask{}, pool);
}

void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool) {
  attention_with(small_ops(), q, k_cache, v_cache, out, n_tokens, pos0, n_heads, n_kv_heads,
                 head_dim, scale, mask, pool);
}

void attention(const float* q, const KvRows& k_cache, const KvRows& v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool) {
  attention_with(small_ops(), q, k_cache, v_cache, out, n_tokens, pos0, n_heads, n_kv_heads,
                 head_dim, scale, mask, pool);
}

void attention(const float* q, const KvRows& k_cache, const KvRows& v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool,
               const KvRowsAhead& ahead) {
  attention_with(small_ops(), q, k_cache, v_cache, out, n_tokens, pos0, n_heads, n_kv_heads,
                 head_dim, scale, mask, pool, ahead);
}

void attention_segments(const float* q, std::span<const AttentionSegment> segs, float* out,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                        const AttentionMask& mask, ThreadPool& pool) {
  attention_segments_with(small_ops(), q, segs, out, n_heads, n_kv_heads, head_dim, scale, mask,
                          pool);
}

}  // namespace hearth::kernels
