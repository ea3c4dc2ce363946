// The batched decode matmul (matmul-batch.cu) through the backend in a Phase::kDecodeBatch pass:
// every B of a decode step of many sequences against the CPU-dequantized product in float64,
// outputs poisoned first: the int8 form (B 5-16), the fp16 forms at 17-64 tokens (the copy-engine
// form for Q4_0 and Q4_K over whole stages of 256 columns: 2048, 2304, 2560, with K splits; the
// streamed form elsewhere: 128 and 2176 columns, and Q8_0), the staged fp16 form's deep kernel
// (40 and 64 over longer rows: few row tiles) and its plain one (256; 96, 100 and 160 in
// balanced token groups of 48, 56 and 56). Row counts leave partial row tiles; column counts
// give one split of one or two stages (128, 256), several whole splits (2048, 2304) and a
// partial last split (2176, 2560); 96 columns (not whole stages of 4 blocks) must take the GEMM
// instead. Dtypes the batched matmul lacks (Q6_K, F16) must still be right through the GEMM.
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "kernels/cuda/decode-batch.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

// x rounds to int8 blocks of 32 as in the GEMV (about 1/250 of each block's range; Q8_0 adds a
// residual level); the GEMM path rounds to fp16. A wrong nibble, scale or row errs by ~100%.
// x in int8 (the GEMV up to 4 tokens, the batched matmul below kMatmulBatchHalfMinTokens), or in
// fp16 (the batched matmul's fp16 form above it, and the GEMM that dtypes without the kernel and
// cols % 128 != 0 take).
double tolerance(DType t, int64_t cols, int64_t B) {
  const bool int8 =
      cuda::matmul_batch_supports(t) &&
      (B <= cuda::kGemvMaxTokens || (cols % 128 == 0 && B < cuda::kMatmulBatchHalfMinTokens));
  if (!int8) return 3e-3;
  return t == DType::Q8_0 ? 1e-4 : 1e-2;
}

class CudaBatchMatmul : public CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  // Above 64 rows the weights' fp16 copies would take these passes (cuda-half-copy-test.cpp):
  // without them every size here runs the batched matmul.
  CudaOptions options() const override {
    CudaOptions o;
    o.half_weights = false;
    return o;
  }
  void check_shared_x(const std::vector<Weight>& ws, const int64_t (&rows)[3], int64_t cols,
                      int64_t B);
};

TEST_P(CudaBatchMatmul, EveryBatchSizeMatchesCpu) {
  const DType t = GetParam();
  const bool k_quant = dtype_info(t).block_size == 256;
  const int64_t rows = 300;
  for (int64_t cols : k_quant ? std::vector<int64_t>{256, 2304, 2560}
                              : std::vector<int64_t>{96, 128, 2048, 2176}) {
    auto bytes = random_weight_bytes(t, rows, cols, uint32_t(cols));
    Weight w = make_weight(t, rows, cols, bytes);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
    const auto wf = cpu_dequant(w);
    for (int64_t B : {2, 3, 5, 8, 17, 32, 40, 64, 96, 100, 160, 256}) {
      const auto x = random_floats(size_t(B * cols), uint32_t(B));
      const auto want = reference_matmul(wf, x, rows, cols, B);
      float* y = poisoned(B * rows);
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      backend_->matmul(w, dev(x), B, y);
      EXPECT_LT(rel_error(get(y, B * rows), want), tolerance(t, cols, B))
          << dtype_name(t) << " " << rows << "x" << cols << " B=" << B;
    }
  }
}

// Q/K/V-like matrices of one x in one launch (row counts of 1, 2 and 3 tiles, one partial), and
// the residual add of matmul_add, in the int8 form (B = 12), the copy-engine fp16 one (B = 24
// over 1024 columns: K splits meeting in a cluster), the streamed one (B = 24 over 1152, 33), the
// staged one, deep at one token group (B = 40, 64: six row tiles) and plain at two (100).
// Enough row tiles (67 of 128 rows, the last partial) that 33-64 tokens take the copy-engine
// form as two token groups of 32 (the second group partly empty at 40), with the residual add.
TEST_P(CudaBatchMatmul, ManyRowTilesInTwoTokenGroups) {
  const DType t = GetParam();
  const int64_t rows = 66 * 128 + 37, cols = 512;
  auto bytes = random_weight_bytes(t, rows, cols, 91);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  const auto wf = cpu_dequant(w);
  for (int64_t B : {33, 40, 64}) {
    const auto x = random_floats(size_t(B * cols), uint32_t(B + 3));
    const auto res = random_floats(size_t(B * rows), uint32_t(B + 4), -2.f, 2.f);
    auto want = reference_matmul(wf, x, rows, cols, B);
    float* y = poisoned(B * rows);
    backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
    backend_->matmul(w, dev(x), B, y);
    EXPECT_LT(rel_error(get(y, B * rows), want), tolerance(t, cols, B))
        << dtype_name(t) << " B=" << B;
    float* dres = dev(res);
    backend_->matmul_add(w, dev(x), B, dres, poisoned(B * rows));
    for (size_t i = 0; i < want.size(); ++i) want[i] += res[i];
    EXPECT_LT(rel_error(get(dres, B * rows), want), tolerance(t, cols, B))
        << dtype_name(t) << " add, B=" << B;
  }
}

// 1024 columns (whole stages of 256) take the copy-engine form from 17 to 32 tokens (Q4_0, Q4_K),
// 1152 the streamed and staged ones.
TEST_P(CudaBatchMatmul, SharedXAndResidualAdd) {
  const DType t = GetParam();
  const int64_t rows[3] = {37, 130, 300};
  for (int64_t cols : dtype_info(t).block_size == 256 ? std::vector<int64_t>{1024}
                                                      : std::vector<int64_t>{1024, 1152}) {
    std::vector<std::vector<uint8_t>> keep;
    std::vector<Weight> ws;
    keep.reserve(3);
    ws.reserve(3);
    for (int i = 0; i < 3; ++i) {
      keep.push_back(random_weight_bytes(t, rows[i], cols, uint32_t(50 + i)));
      ws.push_back(make_weight(t, rows[i], cols, keep.back()));
      ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
    }
    for (int64_t B : {12, 24, 33, 40, 64, 100}) check_shared_x(ws, rows, cols, B);
  }
}

void CudaBatchMatmul::check_shared_x(const std::vector<Weight>& ws, const int64_t (&rows)[3],
                                     int64_t cols, int64_t B) {
  const DType t = GetParam();
  const auto xh = random_floats(size_t(B * cols), 9);
  float* x = dev(xh);
  float* ys[3];
  for (int i = 0; i < 3; ++i) ys[i] = poisoned(B * rows[i]);
  backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
  const Backend::MatmulOut outs[] = {{&ws[0], ys[0]}, {&ws[1], ys[1]}, {&ws[2], ys[2]}};
  backend_->matmul_shared(x, B, outs);
  for (int i = 0; i < 3; ++i) {
    const auto want = reference_matmul(cpu_dequant(ws[i]), xh, rows[i], cols, B);
    EXPECT_LT(rel_error(get(ys[i], B * rows[i]), want), tolerance(t, cols, B))
        << dtype_name(t) << " job " << i << " rows " << rows[i] << " B " << B;
  }
  // residual += x . W2^T, W2 {300, cols}: the product rides in the matmul's store.
  const auto res = random_floats(size_t(B * rows[2]), 10, -2.f, 2.f);
  float* dres = dev(res);
  float* scratch = poisoned(B * rows[2]);
  backend_->matmul_add(ws[2], x, B, dres, scratch);
  auto want = reference_matmul(cpu_dequant(ws[2]), xh, rows[2], cols, B);
  for (size_t i = 0; i < want.size(); ++i) want[i] += res[i];
  EXPECT_LT(rel_error(get(dres, B * rows[2]), want), tolerance(t, cols, B))
      << dtype_name(t) << " add, B " << B;
}

// rmsnorm and swiglu of a batch's rows write the fp16 copy the batched matmul's fp16 form reads
// (B 24: streamed, 40: staged deep, 100: staged): the matmul must take that copy, so the f32 output
// is written over behind the backend's back (no stream op it counts) and the product must still be
// the product of the producer's output (where the dtype has the batched matmul).
TEST_P(CudaBatchMatmul, ProducersHandTheirFp16CopyToTheMatmul) {
  const DType t = GetParam();
  const int64_t rows = 300, cols = dtype_info(t).block_size == 256 ? 1024 : 1152;
  auto bytes = random_weight_bytes(t, rows, cols, 77);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  const auto wf = cpu_dequant(w);
  for (int64_t B : {24, 40, 100}) {
    const auto x = random_floats(size_t(B * cols), uint32_t(B), -2.f, 2.f);
    const auto nw = random_floats(size_t(cols), 5, 0.5f, 1.5f);
    const auto up = random_floats(size_t(B * cols), 6, -2.f, 2.f);
    const auto normed = reference_rmsnorm(x, nw, B, cols, 1e-5);
    std::vector<float> act(x.size());
    for (size_t k = 0; k < act.size(); ++k) {
      const double g = x[k];
      act[k] = float(g / (1.0 + std::exp(-g)) * up[k]);
    }
    const struct {
      const char* op;
      const std::vector<float>& want_x;
    } cases[] = {{"rmsnorm", normed}, {"swiglu", act}};
    // (dtypes without the batched matmul take the GEMM, which converts x itself: no overwrite)
    const bool batched = cuda::matmul_batch_supports(t);
    for (const auto& c : cases) {
      float *dx = dev(x), *dnw = dev(nw), *dup = dev(up), *out = poisoned(B * cols),
            *y = poisoned(B * rows);
      // A first matmul sizes the backend's buffers: one grown between producer and matmul ends
      // the hand-off (a conversion more, still right, but not what this pins).
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      backend_->matmul(w, dx, B, y);
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      if (std::string(c.op) == "rmsnorm")
        backend_->rmsnorm(dx, dnw, out, B, cols, 1e-5f);
      else
        backend_->swiglu(dx, dup, out, B * cols);
      if (batched) {
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemset(out, 0x7f, size_t(B * cols) * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
      backend_->matmul(w, out, B, y);
      EXPECT_LT(rel_error(get(y, B * rows), reference_matmul(wf, c.want_x, rows, cols, B)),
                tolerance(t, cols, B))
          << dtype_name(t) << " " << c.op << " B=" << B;
    }
  }
}

// The FFN's gated half as one named op (matmul_gated): Q4_0 and Q4_K take the copy-engine form
// with the activation in its epilogue from 17 to 64 tokens where n_ff has enough row tiles
// (4352: 68 of 64 rows, whole K-quant blocks for the down projection), over 256 columns (one stage,
// no K split) and 1024 (K splits meeting in a cluster); the other dtypes take the default's ops.
// Against the float64 product, against the same products and activation run as separate ops (the
// same sums: within float rounding of the activation), and through the fp16 form it hands the down
// projection, with its f32 output written over first so the down matmul must take that form.
TEST_P(CudaBatchMatmul, GatedFfnMatchesItsOps) {
  const DType t = GetParam();
  const int64_t n_ff = 68 * 64, n_out = 256;
  for (int64_t cols : {256, 1024}) {
    auto gate_bytes = random_weight_bytes(t, n_ff, cols, 31);
    auto up_bytes = random_weight_bytes(t, n_ff, cols, 32);
    auto down_bytes = random_weight_bytes(t, n_out, n_ff, 33);
    Weight gate = make_weight(t, n_ff, cols, gate_bytes), up = make_weight(t, n_ff, cols, up_bytes),
           down = make_weight(t, n_out, n_ff, down_bytes);
    for (Weight* w : {&gate, &up, &down})
      ASSERT_TRUE(backend_->prepare_weight(*w).is_ok()) << backend_->status().message();
    const auto gf = cpu_dequant(gate), uf = cpu_dequant(up), df = cpu_dequant(down);
    for (int64_t B : {24, 40, 64}) {
      // (x small enough that act(gate) * up stays inside fp16, as a model's does: the fp16
      // form the down projection reads would hold infinities otherwise)
      const auto x = random_floats(size_t(B * cols), uint32_t(B + 40), -0.1f, 0.1f);
      const auto g_want = reference_matmul(gf, x, n_ff, cols, B);
      const auto u_want = reference_matmul(uf, x, n_ff, cols, B);
      for (kernels::GatedAct act : {kernels::GatedAct::kSilu, kernels::GatedAct::kGeluTanh}) {
        const bool silu = act == kernels::GatedAct::kSilu;
        std::vector<float> want(g_want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          const double g = g_want[i], u = u_want[i];
          want[i] = float(
              silu ? g / (1.0 + std::exp(-g)) * u
                   : 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) *
                         u);
        }
        const std::string what = std::string(dtype_name(t)) + " cols " + std::to_string(cols) +
                                 " B " + std::to_string(B) + (silu ? " silu" : " gelu");
        float most = 0;
        for (float v : want) most = std::max(most, std::fabs(v));
        ASSERT_LT(most, 3e4f) << what;
        float* dx = dev(x);
        float *out = poisoned(B * n_ff), *ups = poisoned(B * n_ff);
        backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
        backend_->matmul_gated(dx, B, {&gate, &up, act}, out, ups);
        const auto got = get(out, B * n_ff);
        EXPECT_LT(rel_error(got, want), 4 * tolerance(t, cols, B)) << what;
        // The same products and activation as separate ops.
        float *g_ops = poisoned(B * n_ff), *u_ops = poisoned(B * n_ff);
        backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
        const Backend::MatmulOut outs[] = {{&gate, g_ops}, {&up, u_ops}};
        backend_->matmul_shared(dx, B, outs);
        if (silu)
          backend_->swiglu(g_ops, u_ops, g_ops, B * n_ff);
        else
          backend_->gelu_tanh_gated(g_ops, u_ops, g_ops, B * n_ff);
        EXPECT_LT(rel_error(got, get(g_ops, B * n_ff)), 1e-6) << what << " against the ops";
        // The down projection reads the fp16 form matmul_gated handed it. A first down matmul
        // sizes the backend's buffers and y is made before: a buffer grown or an upload between
        // the two ends the hand-off (a conversion more, still right, but not what this pins).
        float* y = poisoned(B * n_out);
        backend_->matmul(down, out, B, y);
        backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
        backend_->matmul_gated(dx, B, {&gate, &up, act}, out, ups);
        if (cuda::matmul_batch_supports(t)) {
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cudaMemset(out, 0x7f, size_t(B * n_ff) * sizeof(float)), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        }
        backend_->matmul(down, out, B, y);
        EXPECT_LT(rel_error(get(y, B * n_out), reference_matmul(df, want, n_out, n_ff, B)),
                  4 * tolerance(t, n_ff, B))
            << what << " down";
      }
    }
  }
}

// The next block's RMSNorm folded into the O / down projection (the copy-engine form up to 32
// tokens, the staged form's K-split reduction at 40 and 64) and the matmuls after it
// (matmul_add_norm): the residual, and what Q/K-like matrices of one launch (68 row tiles, so
// the copy-engine form reads the folded rows at 33-64 tokens too), the gated pair and a lone
// 40-row matrix (that form up to 32 tokens; above, another, which has the plain norm settle the
// rows first) compute from the normed rows,
// against float64; and the normed rows themselves when something downloads them. A plain norm
// first leaves the per-row scale a fold carries (a pass's first norm is plain).
TEST_P(CudaBatchMatmul, FoldedNormMatchesTheOps) {
  const DType t = GetParam();
  // The producer: an O projection of A columns (4 row tiles, 8 stages: the staged form's deep
  // kernel has K splits at 33-64 tokens; which form folds is pinned below for the dtypes that
  // fold).
  const int64_t E = 512, A = 1024, n_q = 68 * 64, n_ff = 68 * 64;
  std::vector<std::vector<uint8_t>> keep;
  std::vector<Weight> ws;
  keep.reserve(6);
  ws.reserve(6);
  const int64_t shapes[6][2] = {{E, A}, {n_q, E}, {n_q, E}, {n_ff, E}, {n_ff, E}, {40, E}};
  for (int i = 0; i < 6; ++i) {
    keep.push_back(random_weight_bytes(t, shapes[i][0], shapes[i][1], uint32_t(70 + i)));
    ws.push_back(make_weight(t, shapes[i][0], shapes[i][1], keep.back()));
    ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
  }
  std::vector<std::vector<float>> wf;
  for (const Weight& w : ws) wf.push_back(cpu_dequant(w));
  for (int64_t B : {24, 32, 40, 64}) {
    const std::string what = std::string(dtype_name(t)) + " B " + std::to_string(B);
    const auto x0 = random_floats(size_t(B * E), uint32_t(B + 1), -1.f, 1.f);
    const auto a = random_floats(size_t(B * A), uint32_t(B + 2), -0.2f, 0.2f);
    const auto g0 = random_floats(size_t(E), uint32_t(B + 3), 0.5f, 1.5f);
    const auto g1 = random_floats(size_t(E), uint32_t(B + 4), 0.5f, 1.5f);
    // resid = x0 + a . Wo^T, then xn = rmsnorm(resid) * g1
    auto resid = reference_matmul(wf[0], a, E, A, B);
    for (size_t i = 0; i < resid.size(); ++i) resid[i] += x0[i];
    const auto xn = reference_rmsnorm(resid, g1, B, E, 1e-5);
    const auto q_want = reference_matmul(wf[1], xn, n_q, E, B);
    const auto k_want = reference_matmul(wf[2], xn, n_q, E, B);
    const auto g_want = reference_matmul(wf[3], xn, n_ff, E, B);
    const auto u_want = reference_matmul(wf[4], xn, n_ff, E, B);
    const auto s_want = reference_matmul(wf[5], xn, 40, E, B);
    std::vector<float> act_want(g_want.size());
    for (size_t i = 0; i < act_want.size(); ++i) {
      const double gv = g_want[i];
      act_want[i] = float(gv / (1.0 + std::exp(-gv)) * u_want[i]);
    }
    float *dres = dev(x0), *da = dev(a), *dg0 = dev(g0), *dg1 = dev(g1);
    float *dxn = poisoned(B * E), *scratch = poisoned(B * E), *first = poisoned(B * E);
    if (t == DType::Q4_0 || t == DType::Q4_K) {
      cuda::GemvJob job;  // (the shape and aligned stand-ins: what the choice reads)
      job.w.dtype = t, job.w.rows = E, job.w.cols = A;
      job.w.blocks_per_row = A / dtype_info(t).block_size;
      job.w.body = reinterpret_cast<const uint8_t*>(da);
      job.w.aux16 = reinterpret_cast<const uint16_t*>(da);
      job.w.aux_head = reinterpret_cast<const uint4*>(da);
      job.y = scratch, job.add_to = dres;
      EXPECT_EQ(cuda::matmul_batch_staged_norm_takes(job, B), B > 32) << what;
    }
    float *q = poisoned(B * n_q), *k = poisoned(B * n_q), *act = poisoned(B * n_ff),
          *ups = poisoned(B * n_ff), *small = poisoned(B * 40);
    const double tol = 4 * tolerance(t, E, B);
    // (a first round sizes the backend's buffers: one grown mid-way settles the fold, still
    // right, but not what this pins)
    for (int round = 0; round < 2; ++round) {
      ASSERT_EQ(cudaMemcpy(dres, x0.data(), x0.size() * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      backend_->rmsnorm(dres, dg0, first, B, E, 1e-5f);
      backend_->matmul_add_norm(ws[0], da, B, dres, scratch, dg1, 1e-5f, dxn);
      const Backend::MatmulOut qk[] = {{&ws[1], q}, {&ws[2], k}};
      backend_->matmul_shared(dxn, B, qk);
      backend_->matmul_gated(dxn, B, {&ws[3], &ws[4], kernels::GatedAct::kSilu}, act, ups);
      backend_->matmul(ws[5], dxn, B, small);
    }
    EXPECT_LT(rel_error(get(dres, B * E), resid), tol) << what << " residual";
    EXPECT_LT(rel_error(get(q, B * n_q), q_want), tol) << what << " q";
    EXPECT_LT(rel_error(get(k, B * n_q), k_want), tol) << what << " k";
    EXPECT_LT(rel_error(get(act, B * n_ff), act_want), 2 * tol) << what << " gated";
    EXPECT_LT(rel_error(get(small, B * 40), s_want), tol) << what << " small matrix";
    // The normed rows as floats: a download settles the fold.
    ASSERT_EQ(cudaMemcpy(dres, x0.data(), x0.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
    backend_->rmsnorm(dres, dg0, first, B, E, 1e-5f);
    backend_->matmul_add_norm(ws[0], da, B, dres, scratch, dg1, 1e-5f, dxn);
    EXPECT_LT(rel_error(get(dxn, B * E), xn), tol) << what << " rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaBatchMatmul,
                         ::testing::Values(DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K,
                                           DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hearth::test
