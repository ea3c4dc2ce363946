// The mixture-of-experts launchers (moe-route.cu, moe-gemv.cu, moe-gemv-int8.cu):
// Backend::moe_ffn's pieces on the device. Routing runs on the device, so a decode step's expert
// ids never reach the host and the step stays one captured graph. Decode: two gather-GEMVs that
// read only the selected experts' rows (int8 activations for the dtypes the dense int8 GEMV
// reads, f32 for the rest). Prefill: the slots (token, j) grouped by expert (counts, offsets, a
// permutation), one GEMM per expert over its rows (the backend's matmul), a weighted scatter back.
// A slot is s = t * k + j: token t's j-th expert.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

// The router's rule, ops.h route_top_k: logits [T, n_expert] -> ids [T, k] int32 and weights
// [T, k] (softmax, k largest with the lower index first among equal probabilities, renormalised
// when `renorm`). 1 <= k <= n_expert <= kMoeMaxExperts; one warp per token.
constexpr int64_t kMoeMaxExperts = 512;
cudaError_t launch_moe_route(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k,
                             bool renorm, int32_t* ids, float* weights, cudaStream_t s);

// The S slots grouped by expert, stable (ascending slot within an expert): offsets [n_expert + 1]
// (expert e's slots at sorted positions offsets[e] .. offsets[e + 1]), order [S] (the slot at
// each sorted position) and pos_of [S] (its inverse). One block.
cudaError_t launch_moe_group(const int32_t* ids, int64_t n_slots, int64_t n_expert,
                             int32_t* offsets, int32_t* order, int32_t* pos_of, cudaStream_t s);
// rows [S, n]: row i = x [T, n] row order[i] / k (each slot's token).
cudaError_t launch_moe_gather(const float* x, const int32_t* order, int64_t n_slots, int64_t k,
                              int64_t n, float* rows, cudaStream_t s);
// out [T, n] (+)= sum over j of weights[t*k + j] * rows[pos_of[t*k + j]] (j ascending: the sum's
// order is fixed, so the result is deterministic).
cudaError_t launch_moe_scatter(const float* rows, const int32_t* pos_of, const float* weights,
                               int64_t n_tokens, int64_t k, int64_t n, float* out, bool accumulate,
                               cudaStream_t s);
// out [n] = act(gate, up): SwiGLU (limit <= 0) or gpt-oss's clamped SwiGLU (ops.h
// swiglu_clamped with alpha, limit; also the backend's swiglu_clamped op). out may alias gate or
// up.
cudaError_t launch_moe_act(const float* gate, const float* up, float* out, int64_t n, float alpha,
                           float limit, cudaStream_t s);

// A decode step's routing done by the gate+up launch itself (launch_moe_gate_up(_int8) given
// one): each block routes its own token from the logits by launch_moe_route's rule, so the layer
// has no routing launch between the router's GEMV and the experts. The launch then writes ids
// [T, k] and weights [T, k] (launch_moe_route's outputs, for the down launch) instead of reading
// ids.
struct MoeRouter {
  const float* logits = nullptr;  // [T, n_expert]
  int n_expert = 0;               // <= kMoeMaxExperts, >= k
  bool renorm = true;
  float* weights = nullptr;  // [T, k]
};

// One MoE layer's experts on the device: arrays [n_expert] (device memory) of each projection's
// DeviceWeight (gate and up {n_ff, n_embd}, down {n_embd, n_ff}) and bias pointers (null arrays:
// no biases). Every expert has the same dtype.
struct MoeExperts {
  const DeviceWeight* gate = nullptr;
  const DeviceWeight* up = nullptr;
  const DeviceWeight* down = nullptr;
  const float* const* gate_bias = nullptr;
  const float* const* up_bias = nullptr;
  const float* const* down_bias = nullptr;
  DType dtype = DType::F32;
  int64_t n_embd = 0, n_ff = 0;
};
// Whether the gather-GEMVs run experts of dtype t {rows, cols}: a supports_dtype() type whose
// rows are whole groups of 8 (every quant block is).
bool moe_gemv_supports(DType t, int64_t cols);
// h [S, n_ff]: slot s = t*k + j of expert e = ids[s] gets act(gate_e . x_t + bg_e,
// up_e . x_t + bu_e) (launch_moe_act's act). x [T, n_embd]. Reads only the selected experts.
// route: see MoeRouter (ids then written, not read).
cudaError_t launch_moe_gate_up(const MoeExperts& ex, const float* x, int32_t* ids, int64_t n_tokens,
                               int64_t k, float alpha, float limit, float* h, cudaStream_t s,
                               const MoeRouter* route = nullptr);
// out [T, n_embd] (+)= sum over j of weights[s] * (down_e . h[s] + bd_e), s = t*k + j,
// e = ids[s], j ascending.
cudaError_t launch_moe_down(const MoeExperts& ex, const float* h, const int32_t* ids,
                            const float* weights, int64_t n_tokens, int64_t k, float* out,
                            bool accumulate, cudaStream_t s);
// The same two gather-GEMVs on int8 activations (moe-gemv-int8.cu), for the dtypes the dense
// int8 GEMV reads (uses_int8_gemv) with n_embd and n_ff multiples of 32; the f32 pair above stays
// for the others (MXFP4, F16, BF16, F32).
bool moe_gemv_int8_supports(DType t, int64_t n_embd, int64_t n_ff);
// hq_buf (quantized_acts_bytes(T * k, n_ff)) gets h [S, n_ff] as int8 activations
// (quantized_acts_view(hq_buf, S, n_ff)): slot s = t*k + j of expert e = ids[s] gets
// act(gate_e . x_t + bg_e, up_e . x_t + bu_e) as launch_moe_gate_up, x_t read from xa [T, n_embd]
// (T = xa.n_tokens = n_tokens). h, when not null, also gets the f32 values [S, n_ff]. route:
// see MoeRouter (ids then written, not read).
cudaError_t launch_moe_gate_up_int8(const MoeExperts& ex, const QuantizedActs& xa, int32_t* ids,
                                    int64_t n_tokens, int64_t k, float alpha, float limit,
                                    void* hq_buf, float* h, cudaStream_t s,
                                    const MoeRouter* route = nullptr);
// out [T, n_embd] (+)= sum over j of weights[s] * (down_e . h[s] + bd_e), s = t*k + j,
// e = ids[s], h read from hq_buf as launch_moe_gate_up_int8 left it. Each output element is
// summed in a fixed order by one warp (no atomics): the same bits on every run.
cudaError_t launch_moe_down_int8(const MoeExperts& ex, const void* hq_buf, const int32_t* ids,
                                 const float* weights, int64_t n_tokens, int64_t k, float* out,
                                 bool accumulate, cudaStream_t s);
// y [T, rows] = x [T, cols] @ W^T through dq8 (f32 x): the decode GEMV of the dtypes with no
// int8 kernel (MXFP4). moe_gemv_supports(w), 1 <= T <= kGemvMaxTokens.
cudaError_t launch_gemv_dq8(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                            cudaStream_t s);

}  // namespace hearth::cuda
