// The CUDA backend's device picks for chained decoding: after each decode step the argmax, or a
// draw through the sampler chain (kernels/cuda/sample-pick.cu), becomes the next step's token on
// the device, and reaches the host through a pinned ring without stalling the stream.
// The backend owns one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "base/status.h"
#include "kernels/cuda/argmax-ops.h"

namespace hearth {

class CudaPicks {
 public:
  static constexpr int kSlots = 16;  // > the deepest chain: a slot is reused only once waited on
  CudaPicks() = default;
  CudaPicks(const CudaPicks&) = delete;
  CudaPicks& operator=(const CudaPicks&) = delete;
  ~CudaPicks();

  // Whether `rule` can be applied on the device after history_len tokens: the penalties' window
  // must fit the device history (a whole-history window, repeat_last_n -1, is never assumed to).
  static bool supports(const Backend::PickRule& rule, int64_t history_len);
  // The rule of the picks that follow; the penalties' window is copied from history's tail.
  Status set_rule(const Backend::PickRule& rule, std::span<const int32_t> history,
                  cudaStream_t stream);

  // Queues the pick from logits[0, n_vocab) for the step at `pos` on `stream`: the token goes to
  // *step_token and pos + 1 to *step_pos (the next step's inputs, device memory) and into the
  // ring slot of pos. Allocates on first use (never inside a graph capture).
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
  // The sampled pick: its parameters (greedy: the argmax kernel), its scratch row, and the
  // device history ring (kSampleHistoryMax tokens, then its length) the penalties look at.
  bool sampled_ = false;
  cuda::SamplePickParams params_;
  float* work_ = nullptr;
  int64_t work_n_ = 0;
  int32_t* history_ = nullptr;
  int32_t* staging_ = nullptr;  // pinned: the window's upload
};

}  // namespace hearth
