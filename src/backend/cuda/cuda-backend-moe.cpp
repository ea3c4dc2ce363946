// The CUDA backend's mixture-of-experts op (Backend::moe_ffn) and the clamped SwiGLU. The router
// runs on the device (kernels/cuda/moe-ops.h), so expert ids never reach the host in a decode
// step and the step stays one captured graph: up to kGemvMaxTokens tokens go through the
// gather-GEMVs (gate+up with the activation in one launch, down with the routing-weighted sum
// into the residual in the next), which read only the selected experts' rows: on int8
// activations for the dtypes the dense int8 GEMV reads (x quantized once, h quantized by the
// gate+up kernel), on f32 ones for the rest. Larger batches group their slots by expert on the
// device and run one matmul per expert over its rows (one host read of the group offsets per
// layer), then scatter back weighted.
#include <cstring>

#include "backend/cuda/cuda-backend-impl.h"
#include "kernels/cuda/moe-ops.h"

namespace hearth::cuda_impl {

namespace {

size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

// Successive 256-byte-aligned pieces of one scratch buffer.
struct Carve {
  uint8_t* base;
  size_t off = 0;
  template <class T>
  T* take(int64_t n) {
    T* p = reinterpret_cast<T*>(base ? base + off : nullptr);
    off += align256(size_t(n) * sizeof(T));
    return p;
  }
};

float act_limit(const Backend::MoeBlock& m) {
  return m.act == Backend::GatedAct::kSwigluClamped ? m.swiglu_limit : 0.0f;
}

}  // namespace

void CudaBackend::swiglu_clamped(const float* gate, const float* up, float* out, int64_t n,
                                 float alpha, float limit) {
  unfused_op("swiglu", "swiglu_clamped",
             [&] { return cuda::launch_moe_act(gate, up, out, n, alpha, limit, stream_); });
}

// The device path needs one dtype the gather-GEMVs read for every expert, SwiGLU (plain or
// clamped) and a router the kernel holds; anything else takes Backend's host-routed default.
bool CudaBackend::moe_on_device(const MoeBlock& m) {
  if (m.act == GatedAct::kGeluTanh || m.n_expert > cuda::kMoeMaxExperts || m.n_used > 32 ||
      m.n_used < 1 || m.n_used > m.n_expert || m.n_embd % 8 != 0 || m.n_ff % 8 != 0)
    return false;
  const PreparedWeight* first = prepared(m.gate[0], "moe_ffn");
  if (!first) return false;
  for (const auto* list : {&m.gate, &m.up, &m.down})
    for (const Weight& w : *list) {
      const PreparedWeight* pw = prepared(w, "moe_ffn");
      if (!pw || pw->dw.dtype != first->dw.dtype) return false;
    }
  return cuda::moe_gemv_supports(first->dw.dtype, m.n_embd);
}

namespace {

bool same_weight(const cuda::DeviceWeight& a, const cuda::DeviceWeight& b) {
  return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols &&
         a.blocks_per_row == b.blocks_per_row && a.body == b.body && a.aux0 == b.aux0 &&
         a.aux1 == b.aux1 && a.aux16 == b.aux16 && a.aux_head == b.aux_head;
}

}  // namespace

// The layer's expert tables in device memory, made on its first call (outside capture: the
// eager warm-up step makes them before a step is recorded). A table is reused only while it
// still describes the weights it was made from: a Weight list freed and another allocated at
// its address (tests, a reloaded layer) gets a new one.
const cuda::MoeExperts* CudaBackend::moe_experts(const MoeBlock& m) {
  const size_t NE = size_t(m.n_expert);
  const bool biased = !m.gate_bias.empty();
  std::vector<cuda::DeviceWeight> dws(3 * NE);
  std::vector<const float*> biases(biased ? 3 * NE : 0);
  const std::span<const Weight>* lists[] = {&m.gate, &m.up, &m.down};
  for (size_t p = 0; p < 3; ++p)
    for (size_t e = 0; e < NE; ++e) dws[p * NE + e] = prepared((*lists[p])[e], "moe_ffn")->dw;
  const std::span<float* const>* bias_lists[] = {&m.gate_bias, &m.up_bias, &m.down_bias};
  for (size_t p = 0; biased && p < 3; ++p)
    for (size_t e = 0; e < NE; ++e) biases[p * NE + e] = (*bias_lists[p])[e];
  const void* key = &m.gate[0];
  if (auto it = moe_tables_.find(key); it != moe_tables_.end()) {
    const MoeTable& t = it->second;
    bool same = t.biases == biases && t.dws.size() == dws.size();
    for (size_t i = 0; same && i < dws.size(); ++i) same = same_weight(t.dws[i], dws[i]);
    if (same) return &t.experts;
    if (!capturing()) drop_graph();  // a recorded step may read the table replaced below
  }
  if (capturing()) {
    fail("moe_ffn: expert tables made inside a captured decode step");
    return nullptr;
  }
  const size_t dw_bytes = dws.size() * sizeof(cuda::DeviceWeight);
  const size_t bytes = align256(dw_bytes) + biases.size() * sizeof(float*);
  void* mem = nullptr;
  if (!check(cudaMalloc(&mem, bytes), "moe expert tables")) return nullptr;
  MoeTable& t = moe_tables_[key];
  t = MoeTable{};
  t.mem.reset(mem, [](void* q) { cudaFree(q); });
  auto* base = static_cast<uint8_t*>(mem);
  check(cudaMemcpyAsync(base, dws.data(), dw_bytes, cudaMemcpyHostToDevice, stream_),
        "moe expert tables");
  if (biased)
    check(cudaMemcpyAsync(base + align256(dw_bytes), biases.data(), biases.size() * sizeof(float*),
                          cudaMemcpyHostToDevice, stream_),
          "moe expert tables");
  check(cudaStreamSynchronize(stream_), "moe expert tables");  // the host vectors go now
  auto* dev = reinterpret_cast<const cuda::DeviceWeight*>(base);
  auto* bias_dev = reinterpret_cast<const float* const*>(base + align256(dw_bytes));
  t.experts.gate = dev, t.experts.up = dev + NE, t.experts.down = dev + 2 * NE;
  if (biased)
    t.experts.gate_bias = bias_dev, t.experts.up_bias = bias_dev + NE,
    t.experts.down_bias = bias_dev + 2 * NE;
  t.dws = std::move(dws);
  t.biases = std::move(biases);
  t.experts.dtype = t.dws[0].dtype;
  t.experts.n_embd = m.n_embd, t.experts.n_ff = m.n_ff;
  return &t.experts;
}

void CudaBackend::moe_ffn(const MoeBlock& m) {
  if (m.x == folded_.xn) settle_folded_norm();
  const int64_t T = m.n_tokens, F = m.n_ff, NE = m.n_expert, K = m.n_used;
  if (T <= 0) return;
  if (!moe_on_device(m)) {
    if (capturing()) return fail("moe_ffn: this layer's experts need host routing");
    return Backend::moe_ffn(m);
  }
  const int64_t E = m.n_embd, S = T * K;
  const bool gather = T <= cuda::kGemvMaxTokens;
  const cuda::MoeExperts* ex = gather ? moe_experts(m) : nullptr;
  if (gather && !ex) return;
  const bool int8 = gather && cuda::moe_gemv_int8_supports(ex->dtype, E, F);
  // The int8 gather-GEMVs read x quantized, as a dense FFN's GEMV does: usually the rmsnorm
  // before left that form (hand_off_xq). Taken before the router's matmul, which (an F32 router)
  // leaves xq_buf_ alone but does not keep the hand-off's mark.
  if (int8 && !xq_ready(m.x, T, E)) {
    if (!ensure(xq_buf_, cuda::quantized_acts_bytes(T, E), "quantized activations")) return;
    const int qm = prof("quantize x");
    cuda::QuantizedActs xa;
    const bool ok = check(cuda::launch_quantize_acts(m.x, T, E, xq_buf_.ptr, &xa, stream_),
                          "quantize activations");
    unprof(qm);
    if (!ok) return;
    hand_off_xq(m.x, T, E);
  }
  matmul(*m.router, m.x, T, m.logits);
  if (m.router_bias) add_bias(m.logits, m.router_bias, T, NE);
  // Decode scratch (ids, weights, h as f32 or int8) and, for the grouped path, its own buffer:
  // a prefill growing it never moves what a recorded step points at.
  const size_t hq_bytes = int8 ? cuda::quantized_acts_bytes(S, F) : 0;
  Carve step{nullptr};
  step.take<int32_t>(S), step.take<float>(S), step.take<float>(gather && !int8 ? S * F : 0);
  step.take<uint8_t>(int64_t(hq_bytes));
  if (!ensure(moe_step_buf_, step.off, "moe scratch")) return;
  step = Carve{static_cast<uint8_t*>(moe_step_buf_.ptr)};
  int32_t* ids = step.take<int32_t>(S);
  float* weights = step.take<float>(S);
  const float alpha = m.swiglu_alpha, limit = act_limit(m);
  // The gather-GEMVs' gate+up routes each token itself (one launch fewer a layer; with
  // --no-fuse, the separate routing launch).
  const cuda::MoeRouter router{m.logits, int(NE), m.renormalise, weights};
  const cuda::MoeRouter* fused_route = gather && opt_.fuse ? &router : nullptr;
  int mark = -1;
  if (!fused_route) {
    mark = prof("moe route");
    if (!check(cuda::launch_moe_route(m.logits, T, NE, K, m.renormalise, ids, weights, stream_),
               "moe route"))
      return;
    unprof(mark);
  }
  if (int8) {
    void* hq = step.take<uint8_t>(int64_t(hq_bytes));
    const cuda::QuantizedActs xa = cuda::quantized_acts_view(xq_buf_.ptr, T, E);
    mark = prof(fused_route ? "moe route+gate+up" : "moe gate+up");
    check(cuda::launch_moe_gate_up_int8(*ex, xa, ids, T, K, alpha, limit, hq, nullptr, stream_,
                                        fused_route),
          "moe gate_up");
    unprof(mark);
    mark = prof("moe down");
    check(cuda::launch_moe_down_int8(*ex, hq, ids, weights, T, K, m.out, m.accumulate, stream_),
          "moe down");
    unprof(mark);
    return;
  }
  if (gather) {
    float* h = step.take<float>(S * F);
    mark = prof(fused_route ? "moe route+gate+up" : "moe gate+up");
    check(cuda::launch_moe_gate_up(*ex, m.x, ids, T, K, alpha, limit, h, stream_, fused_route),
          "moe gate_up");
    unprof(mark);
    mark = prof("moe down");
    check(cuda::launch_moe_down(*ex, h, ids, weights, T, K, m.out, m.accumulate, stream_),
          "moe down");
    unprof(mark);
    return;
  }
  moe_grouped(m, ids, weights);
}

// Prefill: slots grouped by expert on the device; the offsets come to the host once so each
// expert's rows run as one matmul (GEMM, or GEMV for a few rows) of the ordinary kind.
void CudaBackend::moe_grouped(const MoeBlock& m, const int32_t* ids, const float* weights) {
  const int64_t T = m.n_tokens, E = m.n_embd, F = m.n_ff, NE = m.n_expert, K = m.n_used;
  const int64_t S = T * K;
  if (capturing()) return fail("moe_ffn of several tokens inside a captured decode step");
  Carve pass{nullptr};
  pass.take<int32_t>(NE + 1), pass.take<int32_t>(S), pass.take<int32_t>(S);
  pass.take<float>(S * E), pass.take<float>(S * F), pass.take<float>(S * F),
      pass.take<float>(S * E);
  if (!ensure(moe_pass_buf_, pass.off, "moe scratch")) return;
  pass = Carve{static_cast<uint8_t*>(moe_pass_buf_.ptr)};
  int32_t* offsets = pass.take<int32_t>(NE + 1);
  int32_t* order = pass.take<int32_t>(S);
  int32_t* pos_of = pass.take<int32_t>(S);
  float* xs = pass.take<float>(S * E);
  float* g = pass.take<float>(S * F);
  float* u = pass.take<float>(S * F);
  float* ys = pass.take<float>(S * E);
  int mark = prof("moe group");
  check(cuda::launch_moe_group(ids, S, NE, offsets, order, pos_of, stream_), "moe group");
  check(cuda::launch_moe_gather(m.x, order, S, K, E, xs, stream_), "moe gather");
  std::vector<int32_t> off(size_t(NE + 1));
  check(cudaMemcpyAsync(off.data(), offsets, off.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        stream_),
        "moe offsets");
  if (!check(cudaStreamSynchronize(stream_), "moe offsets")) return;
  unprof(mark);
  const bool biased = !m.gate_bias.empty();
  struct ExpertsScope {  // (no fp16 copies for experts: in_experts_)
    bool& flag;
    explicit ExpertsScope(bool& f) : flag(f) { flag = true; }
    ~ExpertsScope() { flag = false; }
  } scope(in_experts_);
  for (int64_t e = 0; e < NE; ++e) {
    const int64_t r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n <= 0) continue;
    const MatmulOut gate_up[] = {{&m.gate[size_t(e)], g + r0 * F}, {&m.up[size_t(e)], u + r0 * F}};
    matmul_shared(xs + r0 * E, n, gate_up);
    if (biased) {
      add_bias(g + r0 * F, m.gate_bias[size_t(e)], n, F);
      add_bias(u + r0 * F, m.up_bias[size_t(e)], n, F);
    }
  }
  mark = prof("moe act");
  check(cuda::launch_moe_act(g, u, g, S * F, m.swiglu_alpha, act_limit(m), stream_), "moe act");
  unprof(mark);
  for (int64_t e = 0; e < NE; ++e) {
    const int64_t r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n <= 0) continue;
    matmul(m.down[size_t(e)], g + r0 * F, n, ys + r0 * E);
    if (biased) add_bias(ys + r0 * E, m.down_bias[size_t(e)], n, E);
  }
  mark = prof("moe scatter");
  check(cuda::launch_moe_scatter(ys, pos_of, weights, T, K, E, m.out, m.accumulate, stream_),
        "moe scatter");
  unprof(mark);
}

}  // namespace hearth::cuda_impl
