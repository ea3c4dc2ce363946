// Greedy chaining for the CUDA backend: the device-side pick after each decode step and the
// pinned ring through which picked tokens reach the host without stalling the stream.
// The backend owns one; a second pick kind (top-k on device, ...) would be a sibling class.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace hearth {

class CudaGreedyChain {
 public:
  static constexpr int kSlots = 16;  // > the deepest chain: a slot is reused only once waited on
  CudaGreedyChain() = default;
  CudaGreedyChain(const CudaGreedyChain&) = delete;
  CudaGreedyChain& operator=(const CudaGreedyChain&) = delete;
  ~CudaGreedyChain();

  // Queues the argmax of logits[0, n_vocab) for the step at `pos` on `stream`: the token goes to
  // *step_token and pos + 1 to *step_pos (the next step's inputs, device memory) and into the
  // ring slot of pos. Allocates the ring on first use (never inside a graph capture).
  Status pick(const float* logits, int64_t n_vocab, int64_t pos, int32_t* step_token,
              int32_t* step_pos, cudaStream_t stream);
  // Waits for the pick queued for `pos` and returns its token; each pick is taken once (one
  // not taken is dropped when its slot comes round again, kSlots positions later).
  Result<int32_t> wait(int64_t pos);

 private:
  Status init();
  int32_t* ring_host_ = nullptr;  // mapped pinned memory, kSlots tokens
  int32_t* ring_dev_ = nullptr;   // the same memory as the device addresses it
  cudaEvent_t done_[kSlots] = {};
  int64_t slot_pos_[kSlots] = {};  // the position whose pick a slot holds, -1 when free
};

}  // namespace hearth
