// CudaPicks: a device pick per chained decode step (argmax, or a seeded draw), tokens back
// through a mapped pinned ring with one event per slot, so the host enqueues the next steps while
// earlier ones still run. A new readback (several tokens per step, logprobs) would widen the
// ring slot, not the protocol.
#include "backend/cuda/cuda-picks.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace hearth {

namespace {
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::error(std::string("device pick: ") + what + ": " + cudaGetErrorString(e));
}
constexpr int kHistory = cuda::kSampleHistoryMax;
}  // namespace

CudaPicks::~CudaPicks() {
  // The backend synchronizes its stream before its members go, so no pick still writes here.
  for (cudaEvent_t& e : done_)
    if (e) cudaEventDestroy(e);
  if (ring_host_) cudaFreeHost(ring_host_);
  if (staging_) cudaFreeHost(staging_);
  cudaFree(work_);
  cudaFree(history_);
}

Status CudaPicks::init() {
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

bool CudaPicks::supports(const Backend::PickRule& rule, int64_t history_len) {
  if (!rule.penalizes()) return true;
  return rule.repeat_last_n > 0 && rule.repeat_last_n <= kHistory && history_len >= 0;
}

Status CudaPicks::set_rule(const Backend::PickRule& rule, std::span<const int32_t> history,
                           cudaStream_t stream) {
  if (!supports(rule, int64_t(history.size())))
    return Status::error("device pick: the penalties' window (repeat_last_n " +
                         std::to_string(rule.repeat_last_n) + ") does not fit the device's " +
                         std::to_string(kHistory) + "-token history");
  sampled_ = !rule.greedy();
  if (!sampled_) return Status::ok();
  (void)cuda::sample_pick_cluster_blocks(0);  // its one device query, before any capture
  params_ = {};
  params_.temperature = rule.temperature;
  params_.top_k = rule.top_k;
  params_.top_p = rule.top_p;
  params_.min_p = rule.min_p;
  params_.penalize = rule.penalizes();
  params_.repeat_penalty = rule.repeat_penalty;
  params_.repeat_last_n = params_.penalize ? rule.repeat_last_n : 0;
  params_.presence_penalty = rule.presence_penalty;
  params_.frequency_penalty = rule.frequency_penalty;
  params_.seed = rule.seed;
  if (!history_) {
    HEARTH_TRY(cuda_status(
        cudaMalloc(reinterpret_cast<void**>(&history_), (kHistory + 1) * sizeof(int32_t)),
        "history"));
    HEARTH_TRY(cuda_status(
        cudaMallocHost(reinterpret_cast<void**>(&staging_), (kHistory + 1) * sizeof(int32_t)),
        "history"));
  }
  // The window's tokens in order at the ring's start, then the ring's length (last word).
  // (Earlier picks on the stream may still read the staging copy's previous contents.)
  HEARTH_TRY(cuda_status(cudaStreamSynchronize(stream), "history"));
  const size_t n = std::min(history.size(), size_t(kHistory));
  std::memcpy(staging_, history.data() + (history.size() - n), n * sizeof(int32_t));
  staging_[kHistory] = int32_t(n);
  HEARTH_TRY(cuda_status(
      cudaMemcpyAsync(history_, staging_, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
      "history"));
  return cuda_status(cudaMemcpyAsync(history_ + kHistory, staging_ + kHistory, sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream),
                     "history");
}

Status CudaPicks::pick(const float* logits, int64_t n_vocab, int64_t pos, int32_t* step_token,
                       int32_t* step_pos, cudaStream_t stream) {
  if (!ring_dev_) HEARTH_TRY(init());
  if (pos < 0 || pos >= INT32_MAX)
    return Status::error("device pick: position " + std::to_string(pos) + " out of range");
  const int slot = int(pos % kSlots);
  if (slot_pos_[slot] != -1) {
    // A pick nobody took (its chain was abandoned, e.g. by an exception in a callback): let it
    // land before its slot is written again, then drop it.
    HEARTH_TRY(cuda_status(cudaEventSynchronize(done_[slot]), "dropping an untaken pick"));
    slot_pos_[slot] = -1;
  }
  if (sampled_) {
    if (work_n_ < n_vocab) {
      HEARTH_TRY(cuda_status(cudaStreamSynchronize(stream), "sampling scratch"));
      cudaFree(work_);
      work_ = nullptr, work_n_ = 0;
      HEARTH_TRY(
          cuda_status(cudaMalloc(reinterpret_cast<void**>(&work_), size_t(n_vocab) * sizeof(float)),
                      "scratch"));
      work_n_ = n_vocab;
    }
    HEARTH_TRY(
        cuda_status(cuda::launch_sample_pick(logits, work_, n_vocab, params_, history_,
                                             history_ + kHistory, kHistory, step_token, step_pos,
                                             int32_t(pos + 1), ring_dev_ + slot, stream),
                    "sample launch"));
  } else {
    HEARTH_TRY(cuda_status(cuda::launch_greedy_pick(logits, n_vocab, step_token, step_pos,
                                                    int32_t(pos + 1), ring_dev_ + slot, stream),
                           "argmax launch"));
  }
  HEARTH_TRY(cuda_status(cudaEventRecord(done_[slot], stream), "event record"));
  slot_pos_[slot] = pos;
  return Status::ok();
}

Result<int32_t> CudaPicks::wait(int64_t pos) {
  const int slot = pos >= 0 ? int(pos % kSlots) : 0;
  if (!ring_host_ || pos < 0 || slot_pos_[slot] != pos)
    return Status::error("device pick: no pick queued for position " + std::to_string(pos));
  slot_pos_[slot] = -1;
  HEARTH_TRY(cuda_status(cudaEventSynchronize(done_[slot]), "waiting for a pick"));
  return *static_cast<volatile const int32_t*>(ring_host_ + slot);
}

}  // namespace hearth
