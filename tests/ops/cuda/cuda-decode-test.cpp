// A whole Llama layer plus LM head, in forward.cpp's op order, decoded token by token through
// begin/end_decode_step (eager warm-up, capture, replays) with the CUDA backend's named fused ops
// (matmul_shared, matmul_add, rope_append_attend) and its hand-offs (quantizing epilogues),
// checked against the CPU backend and an unfused CUDA backend running the same ops; and with an
// op inserted after a hand-off's producer, which must end the hand-off. New fusion: extend the
// op list here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "cuda-test-util.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

constexpr int64_t kVocab = 64, kE = 128, kHeads = 4, kKvHeads = 2, kHd = 32, kF = 256, kCap = 16;

struct LayerModel {
  std::vector<std::vector<uint8_t>> bytes;
  Weight tok, wq, wk, wv, wo, gate, up, down, out;
  float *n1 = nullptr, *n2 = nullptr, *n3 = nullptr;
  float *x, *xn, *q, *k, *v, *attn, *g, *u, *logits, *kc, *vc;
};

void make_weight(LayerModel& m, Weight& w, const char* name, DType t, int64_t rows, int64_t cols,
                 uint32_t seed) {
  m.bytes.push_back(random_weight_bytes(t, rows, cols, seed));
  w.host = TensorView{name, t, {rows, cols}, m.bytes.back().data(), m.bytes.back().size()};
}

// Same weights (seeded) on either backend.
void build(LayerModel& m, Backend& be, DType t, std::vector<float>& norm_host) {
  m.bytes.reserve(16);
  make_weight(m, m.tok, "tok", DType::Q8_0, kVocab, kE, 1);
  make_weight(m, m.wq, "wq", t, kHeads * kHd, kE, 2);
  make_weight(m, m.wk, "wk", t, kKvHeads * kHd, kE, 3);
  make_weight(m, m.wv, "wv", t, kKvHeads * kHd, kE, 4);
  make_weight(m, m.wo, "wo", t, kE, kHeads * kHd, 5);
  make_weight(m, m.gate, "gate", t, kF, kE, 6);
  make_weight(m, m.up, "up", t, kF, kE, 7);
  make_weight(m, m.down, "down", t, kE, kF, 8);
  make_weight(m, m.out, "out", t, kVocab, kE, 9);
  for (Weight* w : {&m.tok, &m.wq, &m.wk, &m.wv, &m.wo, &m.gate, &m.up, &m.down, &m.out})
    ASSERT_TRUE(be.prepare_weight(*w).is_ok());
  TensorView nv{"norm", DType::F32, {kE}, norm_host.data(), norm_host.size() * 4};
  m.n1 = be.prepare_vector(nv).value();
  m.n2 = be.prepare_vector(nv).value();
  m.n3 = be.prepare_vector(nv).value();
  for (float** p : {&m.x, &m.xn, &m.attn}) *p = be.alloc(kE);
  m.q = be.alloc(kHeads * kHd);
  m.k = be.alloc(kKvHeads * kHd);
  m.v = be.alloc(kKvHeads * kHd);
  m.g = be.alloc(kF);
  m.u = be.alloc(kF);
  m.logits = be.alloc(kVocab);
  m.kc = be.alloc(kCap * kKvHeads * kHd);
  m.vc = be.alloc(kCap * kKvHeads * kHd);
}

// forward.cpp's decode ops for one layer and the LM head. inserted_op: a scale of the normed x
// between the rmsnorm (which hands its int8 form to the next GEMV) and the Q/K/V GEMVs, as a new
// family's block would sit there: the GEMVs must then read the scaled x, not the hand-off.
void step_ops(Backend& be, LayerModel& m, int32_t token, int32_t pos, const float* inv,
              bool inserted_op = false) {
  be.begin_pass(Backend::Phase::kDecode, 1);
  be.embed(m.tok, &token, 1, m.x);
  be.rmsnorm(m.x, m.n1, m.xn, 1, kE, 1e-5f);
  if (inserted_op) be.scale(m.xn, kE, 0.5f);
  const Backend::MatmulOut qkv[] = {{&m.wq, m.q}, {&m.wk, m.k}, {&m.wv, m.v}};
  be.matmul_shared(m.xn, 1, qkv);
  const Backend::KvSegment seg{m.kc, DType::F32, m.vc, DType::F32, pos, 1, 0};
  Backend::AttentionBlock a;
  a.q = m.q, a.k = m.k, a.v = m.v, a.out = m.attn, a.host_pos = &pos;
  a.n_tokens = 1, a.n_heads = kHeads, a.n_kv_heads = kKvHeads, a.head_dim = kHd;
  a.scale = 1.f / std::sqrt(float(kHd));
  a.rope = {inv, kernels::RopeStyle::kHalves, kHd, 1.f, false};
  a.segments = {&seg, 1};
  be.rope_append_attend(a);
  be.matmul_add(m.wo, m.attn, 1, m.x, m.xn);
  be.rmsnorm(m.x, m.n2, m.xn, 1, kE, 1e-5f);
  const Backend::MatmulOut gate_up[] = {{&m.gate, m.g}, {&m.up, m.u}};
  be.matmul_shared(m.xn, 1, gate_up);
  be.swiglu(m.g, m.u, m.g, kF);
  be.matmul_add(m.down, m.g, 1, m.x, m.xn);
  be.rmsnorm(m.x, m.n3, m.xn, 1, kE, 1e-5f);
  be.matmul(m.out, m.xn, 1, m.logits);
}

struct DecodeCase {
  DType type;
  bool inserted_op;
};

class CudaDecodeLayerTest : public CudaTest, public ::testing::WithParamInterface<DecodeCase> {};

TEST_P(CudaDecodeLayerTest, FusedStepsMatchCpu) {
  const DType t = GetParam().type;
  const bool inserted = GetParam().inserted_op;
  auto cpu = make_cpu_backend(1);
  auto plain = make_unfused_cuda_backend();
  ASSERT_TRUE(plain);
  std::vector<float> norm = random_floats(size_t(kE), 11, 0.5f, 1.5f);
  std::vector<float> inv(size_t(kHd / 2));
  for (int64_t i = 0; i < kHd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / kHd));
  LayerModel g, c, r;
  build(g, *backend_, t, norm);
  build(c, *cpu, t, norm);
  build(r, *plain, t, norm);
  std::vector<float> got(kVocab), want(kVocab), ref(kVocab), gx(kE), cx(kE), rx(kE);
  for (int32_t pos = 0; pos < 10; ++pos) {
    const int32_t token = (pos * 13 + 5) % int32_t(kVocab);
    const bool replayed = backend_->begin_decode_step(token, pos, kCap);
    if (!replayed) step_ops(*backend_, g, token, pos, inv.data(), inserted);
    backend_->end_decode_step();
    if (pos >= 2) {  // the fixture's backend records graphs (the default options)
      EXPECT_TRUE(replayed) << "pos " << pos;
    }
    step_ops(*cpu, c, token, pos, inv.data(), inserted);
    step_ops(*plain, r, token, pos, inv.data(), inserted);
    backend_->download(got.data(), g.logits, kVocab);
    backend_->download(gx.data(), g.x, kE);
    cpu->download(want.data(), c.logits, kVocab);
    cpu->download(cx.data(), c.x, kE);
    plain->download(ref.data(), r.logits, kVocab);
    plain->download(rx.data(), r.x, kE);
    EXPECT_LT(rel_error(gx, rx), 1e-5) << "residual vs unfused, pos " << pos;
    EXPECT_LT(rel_error(got, ref), 1e-5) << "logits vs unfused, pos " << pos;
    // Against the CPU: int8 activations (one level for Q4_0) differ from the CPU's own.
    const double tol = t == DType::Q4_0 ? 5e-2 : 1e-2;
    EXPECT_LT(rel_error(gx, cx), tol) << "residual vs CPU, pos " << pos;
    EXPECT_LT(rel_error(got, want), tol) << "logits vs CPU, pos " << pos;
    ASSERT_TRUE(backend_->status().is_ok()) << backend_->status().message();
  }
  EXPECT_TRUE(plain->status().is_ok()) << plain->status().message();
  for (LayerModel* m : {&g, &c, &r}) {
    Backend& be = m == &g ? *backend_ : m == &c ? *cpu : *plain;
    for (float* p : {m->x, m->xn, m->q, m->k, m->v, m->attn, m->g, m->u, m->logits, m->kc, m->vc})
      be.free(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDecodeLayerTest,
                         ::testing::Values(DecodeCase{DType::Q8_0, false},
                                           DecodeCase{DType::F16, false},
                                           DecodeCase{DType::Q4_0, false},
                                           DecodeCase{DType::Q8_0, true},
                                           DecodeCase{DType::Q4_0, true}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.type)) +
                                  (info.param.inserted_op ? "_inserted_op" : "");
                         });

}  // namespace
}  // namespace hearth::test
