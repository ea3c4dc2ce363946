// CudaOptions::profile (hearth --cuda-profile): where a decode token's GPU time goes, per op
// family. Eager decode steps are queued behind a spin kernel (so they run back to back, as in a
// graph) and each launch is bracketed by CUDA events; graph replays are timed whole. One table on
// stderr, once. Prefill passes (embed of > 4 tokens .. the next download) get the same per-family
// table each.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace hearth {

class CudaProfiler {
 public:
  static constexpr int kEagerSteps = 16;  // profiled eager steps (after one unprofiled warm-up)
  static constexpr int kGraphSteps = 32;  // timed graph replays afterwards

  explicit CudaProfiler(bool graphs) : graphs_(graphs) {}
  ~CudaProfiler();

  // True while the next decode steps must run eagerly to be profiled.
  bool wants_eager() const { return eager_done_ < kEagerSteps + 1; }
  void begin_eager_step(cudaStream_t s);  // call right after the step's inputs are queued
  int begin_op(const char* family, cudaStream_t s);  // -1 when not in a profiled step
  void end_op(int mark, cudaStream_t s);
  void end_eager_step(cudaStream_t s, long ctx_capacity);
  void begin_replay(cudaStream_t s);
  void end_replay(cudaStream_t s);
  // A prefill pass: every launch until end_prefill() is bracketed by events (no spin: the host
  // runs ahead of the GPU anyway, so GPU time not covered by ops is idle time, e.g. syncs).
  void begin_prefill(cudaStream_t s, long n_tokens);
  void end_prefill(cudaStream_t s);
  bool in_prefill() const { return prefill_active_; }

 private:
  cudaEvent_t event();
  void print() const;

  struct Family {
    double ms = 0;
    long launches = 0;
    double max_ms = 0;  // the longest launch (a one-time cost, e.g. lazy kernel loading, shows)
  };
  bool graphs_;
  bool active_ = false, replay_active_ = false, printed_ = false;
  bool prefill_active_ = false;
  int prefills_ = 0;
  long prefill_tokens_ = 0;
  double prefill_host_t0_ = 0;
  int eager_done_ = 0, replays_ = 0;
  long ctx_ = 0;
  double eager_ms_ = 0, graph_ms_ = 0;
  std::vector<cudaEvent_t> pool_;
  size_t next_ = 0;
  std::vector<std::pair<std::string, size_t>> marks_;
  std::map<std::string, Family> families_;
  cudaEvent_t step0_ = nullptr, step1_ = nullptr;
};

}  // namespace hearth
