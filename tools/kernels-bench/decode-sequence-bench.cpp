// hearth-decode-sequence-bench: one decode step's matmuls, and nothing else, in the model's order
// and grouping (Q/K/V as one shared call, O, gate/up shared, down, per layer; then the LM head),
// on random packed weights of a real shape. It shows what the packed kernels and the hand-out
// stream in the model's call sizes, without attention, norms or sampling; `hearth bench` gives
// the whole step. Usage: hearth-decode-sequence-bench [tinyllama-1b|llama2-7b [TYPE [reps
// [threads]]]] with TYPE one of q4_0 (default), q4_k, q8_0, f16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/huge-buffer.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

using namespace hearth;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* name;
  int64_t layers, dim, kv_dim, ffn, vocab;
};
constexpr Shape kShapes[] = {{"tinyllama-1b", 22, 2048, 256, 5632, 32000},
                             {"llama2-7b", 32, 4096, 4096, 11008, 32000}};

// One packed matrix on 2 MiB pages, as the CPU backend maps its weight cache.
struct Packed {
  int64_t d = 0, n = 0;
  uint64_t bytes = 0;
  HugeBuffer buffer;
  uint8_t* p() const { return buffer.get(); }
};

Packed make_packed(DType t, int64_t d, int64_t n, std::mt19937& rng, ThreadPool& pool) {
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> wf(size_t(d * n));
  for (float& v : wf) v = nd(rng);
  const uint64_t src_bytes = *row_bytes(t, uint64_t(n)) * uint64_t(d);
  std::vector<uint8_t> q(src_bytes);
  if (!kernels::quantize_rows(t, wf.data(), q.data(), d, n, &pool).is_ok()) std::exit(1);
  Packed m;
  m.d = d;
  m.n = n;
  m.bytes = *kernels::packed_size(t, d, n);
  m.buffer = HugeBuffer(m.bytes);
  kernels::pack_weight(TensorView{"w", t, {d, n}, q.data(), src_bytes}, m.p(), pool);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape_name = argc > 1 ? argv[1] : "tinyllama-1b";
  const std::string type_name = argc > 2 ? argv[2] : "q4_0";
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 10;
  const int threads = argc > 4 ? std::max(1, std::atoi(argv[4])) : 2;
  const Shape* s = nullptr;
  for (const Shape& c : kShapes)
    if (shape_name == c.name) s = &c;
  const DType t = type_name == "q4_k"   ? DType::Q4_K
                  : type_name == "q8_0" ? DType::Q8_0
                  : type_name == "f16"  ? DType::F16
                                        : DType::Q4_0;
  if (!s || !kernels::packed_size(t, 16, 256)) {
    std::fprintf(stderr,
                 "usage: %s [tinyllama-1b|llama2-7b [q4_0|q4_k|q8_0|f16 [reps [threads]]]]"
                 " (needs a packed layout for the type on this CPU)\n",
                 argv[0]);
    return 2;
  }
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  // Per layer: q, k, v, o, gate, up, down; then the LM head.
  std::vector<Packed> w;
  for (int64_t l = 0; l < s->layers; ++l)
    for (auto [d, n] : {std::pair{s->dim, s->dim},
                        {s->kv_dim, s->dim},
                        {s->kv_dim, s->dim},
                        {s->dim, s->dim},
                        {s->ffn, s->dim},
                        {s->ffn, s->dim},
                        {s->dim, s->ffn}})
      w.push_back(make_packed(t, d, n, rng, pool));
  w.push_back(make_packed(t, s->vocab, s->dim, rng, pool));
  uint64_t bytes = 0;
  for (const Packed& m : w) bytes += m.bytes;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(std::max(s->dim, s->ffn)));
  for (float& v : x) v = nd(rng);
  std::vector<float> y0(size_t(s->vocab)), y1(size_t(s->ffn)), y2(size_t(s->ffn));
  auto step = [&] {
    for (int64_t l = 0; l < s->layers; ++l) {
      const Packed* m = &w[size_t(l * 7)];
      const kernels::PackedMatmul qkv[3] = {{t, m[0].p(), m[0].d, y0.data()},
                                            {t, m[1].p(), m[1].d, y1.data()},
                                            {t, m[2].p(), m[2].d, y2.data()}};
      kernels::matmul_packed_shared(qkv, s->dim, x.data(), 1, pool);
      kernels::matmul_packed(t, m[3].p(), m[3].d, m[3].n, x.data(), 1, y0.data(), pool);
      const kernels::PackedMatmul gate_up[2] = {{t, m[4].p(), m[4].d, y1.data()},
                                                {t, m[5].p(), m[5].d, y2.data()}};
      kernels::matmul_packed_shared(gate_up, s->dim, x.data(), 1, pool);
      kernels::matmul_packed(t, m[6].p(), m[6].d, m[6].n, x.data(), 1, y0.data(), pool);
    }
    kernels::matmul_packed(t, w.back().p(), w.back().d, w.back().n, x.data(), 1, y0.data(), pool);
  };
  step();  // warm-up: page tables, pool threads
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    step();
    secs.push_back(now_s() - t0);
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  std::printf(
      "%s %s, %d threads (%s): %.1f MB per step, median %.2f GB/s (%.2f steps/s), "
      "best %.2f GB/s, %d reps\n",
      s->name, dtype_name(t), threads, kernels::active_kernel_table().name, double(bytes) / 1e6,
      double(bytes) / median / 1e9, 1 / median, double(bytes) / secs[0] / 1e9, reps);
  return 0;
}
