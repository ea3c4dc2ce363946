// Launchers of the device picks (argmax, and a draw through the sampler chain, over one row of
// logits), kept apart from cuda-ops.h because they feed the decode-step machinery, not a
// kernels/ops.h op.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hearth::cuda {

// logits [n] (device, 16-byte aligned) -> the index of the largest value, NaN counting as -inf,
// the lowest index among equals, 0 when every value is -inf or NaN (backend.h greedy_argmax).
// One block. The index goes to *token (device), next_pos to *pos (device; the next decode
// step's position) and the index again to *host_token (mapped pinned memory, read by the host
// after an event recorded behind this launch). 0 < n <= INT32_MAX.
cudaError_t launch_greedy_pick(const float* logits, int64_t n, int32_t* token, int32_t* pos,
                               int32_t next_pos, int32_t* host_token, cudaStream_t stream);

// Greedy picks of `rows` rows of n logits each (device, contiguous) by launch_greedy_pick's rule:
// ids[r] (device) for row r. One block a row.
cudaError_t launch_argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids,
                               cudaStream_t stream);
// The sampled pick (sample-pick.cu): sampling/sampler.h's chain on the device. Penalties look at
// the last repeat_last_n tokens of a device history ring (history [history_cap], its length in
// *history_len), to which the pick appends its token.
constexpr int kSampleHistoryMax = 4096;
struct SamplePickParams {
  float temperature = 0.8f;  // <= 0: argmax of the penalised logits
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  bool penalize = false;     // the three penalties below, over repeat_last_n tokens
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 0;  // 0 .. history_cap
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  uint64_t seed = 0;  // with the step's position, the draw's uniform
};
// logits [n] (device) -> a token drawn from the distribution sampling/sampler.h draws from
// (Gumbel-max, its variates from seed, next_pos - 1 and the id: the same seed draws the same
// tokens). work: device scratch [n] (the penalised logits). Outputs as launch_greedy_pick's. One
// thread-block cluster.
// Blocks in the sampled pick's cluster for a vocabulary of n ids (8, or 16 where the device
// runs that). Asks the device on its first call: make that call outside a stream capture.
int sample_pick_cluster_blocks(int64_t n);
cudaError_t launch_sample_pick(const float* logits, float* work, int64_t n,
                               const SamplePickParams& p, int32_t* history, int32_t* history_len,
                               int history_cap, int32_t* token, int32_t* pos, int32_t next_pos,
                               int32_t* host_token, cudaStream_t stream);

// A served step's draws in one launch (one cluster a row): each entry draws from logits row
// `row` ([rows, n], device) by its rule at its position, as launch_sample_pick would with an
// empty history, and writes the id to ids[row] (device). Rules with penalties are not drawn
// here (their penalties are ignored): the caller keeps them on the host. 0 <= count <= 65535.
struct SampleRowPick {
  SamplePickParams p;
  int32_t row = 0;
  int32_t next_pos = 0;  // the position after the row's token (the draw's stream, as the chain's)
};
cudaError_t launch_sample_picks(const float* logits, int64_t n, const SampleRowPick* rows,
                                int64_t count, int32_t* ids, cudaStream_t stream);

}  // namespace hearth::cuda
