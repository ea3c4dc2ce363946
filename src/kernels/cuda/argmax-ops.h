// Launcher of the greedy pick (argmax over one row of logits on the device), kept apart from
// cuda-ops.h because it feeds the decode-step machinery, not a kernels/ops.h op.
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

}  // namespace hearth::cuda
