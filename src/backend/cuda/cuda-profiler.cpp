// CudaProfiler (cuda-profiler.h): event pairs per launch in profiled eager decode steps, summed per
// op family, then whole-step timing of graph replays; printed as one table.
// New op family: pass its name to begin_op() at the launch site (cuda-backend-ops.cpp,
// cuda-backend-attention.cpp).
#include "backend/cuda/cuda-profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kernels/cuda/cuda-ops.h"

namespace hearth {

namespace {
constexpr int64_t kSpinUs = 20000;  // long enough for the CPU to queue a whole 7B step
constexpr int kMaxPrefills = 4;     // profiled prefill passes (a bench's warm-up and repeats)

double host_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

CudaProfiler::~CudaProfiler() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  if (step0_) cudaEventDestroy(step0_), cudaEventDestroy(step1_);
}

cudaEvent_t CudaProfiler::event() {
  if (next_ == pool_.size()) {
    cudaEvent_t e = nullptr;
    cudaEventCreate(&e);
    pool_.push_back(e);
  }
  return pool_[next_++];
}

void CudaProfiler::begin_eager_step(cudaStream_t s) {
  if (!step0_) cudaEventCreate(&step0_), cudaEventCreate(&step1_);
  // The first step sizes buffers and uploads tables: not representative, not profiled.
  active_ = eager_done_ > 0;
  if (!active_) return;
  next_ = 0;
  marks_.clear();
  cuda::launch_spin(kSpinUs, s);
  cudaEventRecord(step0_, s);
}

int CudaProfiler::begin_op(const char* family, cudaStream_t s) {
  if (!active_ && !prefill_active_) return -1;
  const size_t i = next_;
  cudaEventRecord(event(), s);
  event();
  marks_.push_back({family, i});
  return int(marks_.size() - 1);
}

void CudaProfiler::end_op(int mark, cudaStream_t s) {
  if (mark < 0) return;
  cudaEventRecord(pool_[marks_[size_t(mark)].second + 1], s);
}

void CudaProfiler::end_eager_step(cudaStream_t s, long ctx_capacity) {
  ++eager_done_;
  ctx_ = ctx_capacity;
  if (!active_) return;
  active_ = false;
  cudaEventRecord(step1_, s);
  cudaStreamSynchronize(s);
  float ms = 0;
  for (const auto& [name, i] : marks_) {
    cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]);
    Family& f = families_[name];
    f.ms += ms;
    ++f.launches;
  }
  cudaEventElapsedTime(&ms, step0_, step1_);
  eager_ms_ += ms;
  if (!wants_eager() && !graphs_) print();
}

void CudaProfiler::begin_replay(cudaStream_t s) {
  replay_active_ = !printed_ && !wants_eager() && replays_ < kGraphSteps;
  if (replay_active_) cudaEventRecord(step0_, s);
}

void CudaProfiler::end_replay(cudaStream_t s) {
  if (!replay_active_) return;
  replay_active_ = false;
  cudaEventRecord(step1_, s);
  cudaStreamSynchronize(s);
  float ms = 0;
  cudaEventElapsedTime(&ms, step0_, step1_);
  graph_ms_ += ms;
  if (++replays_ == kGraphSteps) print();
}

void CudaProfiler::begin_prefill(cudaStream_t s, long n_tokens) {
  if (active_ || prefill_active_ || prefills_ >= kMaxPrefills) return;
  if (!step0_) cudaEventCreate(&step0_), cudaEventCreate(&step1_);
  prefill_active_ = true;
  prefill_tokens_ = n_tokens;
  next_ = 0;
  marks_.clear();
  prefill_host_t0_ = host_ms();
  cudaEventRecord(step0_, s);
}

void CudaProfiler::end_prefill(cudaStream_t s) {
  if (!prefill_active_) return;
  prefill_active_ = false;
  ++prefills_;
  cudaEventRecord(step1_, s);
  cudaStreamSynchronize(s);
  const double host = host_ms() - prefill_host_t0_;
  std::map<std::string, Family> fam;
  float ms = 0;
  double sum = 0;
  for (const auto& [name, i] : marks_) {
    cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]);
    Family& f = fam[name];
    f.ms += ms;
    ++f.launches;
    f.max_ms = std::max(f.max_ms, double(ms));
    sum += ms;
  }
  marks_.clear();
  next_ = 0;
  cudaEventElapsedTime(&ms, step0_, step1_);
  std::vector<std::pair<std::string, Family>> rows(fam.begin(), fam.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::fprintf(stderr, "hearth cuda prefill profile %d: %ld tokens\n  %-22s %9s %10s %7s %9s\n",
               prefills_, prefill_tokens_, "op family", "launches", "us", "share", "max us");
  for (const auto& [name, f] : rows)
    std::fprintf(stderr, "  %-22s %9ld %10.1f %6.1f%% %9.1f\n", name.c_str(), f.launches,
                 1000.0 * f.ms, 100.0 * f.ms / (sum > 0 ? sum : 1), 1000.0 * f.max_ms);
  std::fprintf(stderr, "  %-22s %9s %10.1f\n", "sum of ops", "", 1000.0 * sum);
  std::fprintf(
      stderr, "  %-22s %9s %10.1f  (GPU, first op to download; %.0f tok/s; not in ops: %.1f us)\n",
      "pass", "", 1000.0 * ms, prefill_tokens_ * 1000.0 / (ms > 0 ? ms : 1), 1000.0 * (ms - sum));
  std::fprintf(stderr, "  %-22s %9s %10.1f\n", "host wall", "", 1000.0 * host);
}

void CudaProfiler::print() const {
  if (printed_) return;
  const_cast<CudaProfiler*>(this)->printed_ = true;
  const double steps = kEagerSteps;
  double sum = 0;
  std::vector<std::pair<std::string, Family>> rows(families_.begin(), families_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  for (const auto& r : rows) sum += r.second.ms;
  std::fprintf(stderr,
               "hearth cuda profile: %d eager decode steps (context capacity %ld), per token\n"
               "  %-22s %9s %10s %7s\n",
               kEagerSteps, ctx_, "op family", "launches", "us", "share");
  for (const auto& [name, f] : rows)
    std::fprintf(stderr, "  %-22s %9.1f %10.1f %6.1f%%\n", name.c_str(), double(f.launches) / steps,
                 1000.0 * f.ms / steps, 100.0 * f.ms / (sum > 0 ? sum : 1));
  std::fprintf(stderr, "  %-22s %9s %10.1f\n", "sum of ops", "", 1000.0 * sum / steps);
  std::fprintf(stderr, "  %-22s %9s %10.1f  (launches back to back after a spin)\n", "eager step",
               "", 1000.0 * eager_ms_ / steps);
  if (replays_ > 0)
    std::fprintf(stderr, "  %-22s %9s %10.1f  (%d replays, %.0f tok/s on the GPU alone)\n",
                 "graph replay", "", 1000.0 * graph_ms_ / replays_, replays_,
                 replays_ * 1000.0 / graph_ms_);
}

}  // namespace hearth
