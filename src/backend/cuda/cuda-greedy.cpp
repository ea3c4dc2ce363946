// CudaGreedyChain: device argmax per decode step, tokens back through a mapped pinned ring with
// one event per slot, so the host enqueues the next steps while earlier ones still run.
// A new readback (several tokens per step, logprobs) would widen the ring slot, not the protocol.
#include "backend/cuda/cuda-greedy.h"

#include <cstring>
#include <string>

#include "kernels/cuda/argmax-ops.h"

namespace hearth {

namespace {
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::error(std::string("greedy chain: ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

CudaGreedyChain::~CudaGreedyChain() {
  // The backend synchronizes its stream before its members go, so no pick still writes here.
  for (cudaEvent_t& e : done_)
    if (e) cudaEventDestroy(e);
  if (ring_host_) cudaFreeHost(ring_host_);
}

Status CudaGreedyChain::init() {
  for (int64_t& p : slot_pos_) p = -1;
  if (!ring_host_) {
    void* host = nullptr;
    HEARTH_TRY(cuda_status(cudaHostAlloc(&host, kSlots * sizeof(int32_t), cudaHostAllocMapped),
                           "mapped ring"));
    ring_host_ = static_cast<int32_t*>(host);
  }
  for (cudaEvent_t& e : done_)
    if (!e) HEARTH_TRY(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event"));
  void* dev = nullptr;
  HEARTH_TRY(cuda_status(cudaHostGetDevicePointer(&dev, ring_host_, 0), "mapped ring address"));
  ring_dev_ = static_cast<int32_t*>(dev);  // last: set only once everything above exists
  return Status::ok();
}

Status CudaGreedyChain::pick(const float* logits, int64_t n_vocab, int64_t pos, int32_t* step_token,
                             int32_t* step_pos, cudaStream_t stream) {
  if (!ring_dev_) HEARTH_TRY(init());
  if (pos < 0 || pos >= INT32_MAX)
    return Status::error("greedy chain: position " + std::to_string(pos) + " out of range");
  const int slot = int(pos % kSlots);
  if (slot_pos_[slot] != -1) {
    // A pick nobody took (its chain was abandoned, e.g. by an exception in a callback): let it
    // land before its slot is written again, then drop it.
    HEARTH_TRY(cuda_status(cudaEventSynchronize(done_[slot]), "dropping an untaken pick"));
    slot_pos_[slot] = -1;
  }
  HEARTH_TRY(cuda_status(cuda::launch_greedy_pick(logits, n_vocab, step_token, step_pos,
                                                  int32_t(pos + 1), ring_dev_ + slot, stream),
                         "argmax launch"));
  HEARTH_TRY(cuda_status(cudaEventRecord(done_[slot], stream), "event record"));
  slot_pos_[slot] = pos;
  return Status::ok();
}

Result<int32_t> CudaGreedyChain::wait(int64_t pos) {
  const int slot = pos >= 0 ? int(pos % kSlots) : 0;
  if (!ring_host_ || pos < 0 || slot_pos_[slot] != pos)
    return Status::error("greedy chain: no pick queued for position " + std::to_string(pos));
  slot_pos_[slot] = -1;
  HEARTH_TRY(cuda_status(cudaEventSynchronize(done_[slot]), "waiting for a pick"));
  return *static_cast<volatile const int32_t*>(ring_host_ + slot);
}

}  // namespace hearth
