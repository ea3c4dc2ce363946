// hearth-stall-probe: how much of a memory-streaming thread's time goes in stalls the guest does
// not see (no steal time, no fault, no interrupt count moves), and how often the threads stall
// together. Each thread reads its own buffer line by line and notes every gap over 50 us
// between two steps of 64 lines (a step takes well under a microsecond). Why it matters: the
// bandwidth probe is one long pass per thread, where a stalled thread's time is just its own,
// while a decode step joins the threads ~90 times (1B), and every join waits out a stall of
// either thread. Usage: hearth-stall-probe [threads [MiB per thread [seconds]]].
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGapSeconds = 50e-6;

struct Gap {
  double begin, end;  // seconds since the start
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const uint64_t bytes = uint64_t(argc > 2 ? std::max(1, std::atoi(argv[2])) : 512) << 20;
  const double run_seconds = argc > 3 ? std::max(0.5, std::atof(argv[3])) : 4.0;
  std::vector<std::vector<Gap>> gaps(static_cast<size_t>(threads));
  std::vector<uint64_t> sinks(static_cast<size_t>(threads));
  const Clock::time_point start = Clock::now();
  auto stream = [&](int t) {
    std::unique_ptr<uint8_t[]> buf(new uint8_t[bytes]);
    std::memset(buf.get(), t + 1, bytes);
    uint64_t off = 0, sum = 0;
    const Clock::time_point begin = Clock::now();  // after the first touch: not a stall
    Clock::time_point last = begin;
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (seconds(last, now) > kGapSeconds)
        gaps[size_t(t)].push_back({seconds(start, last), seconds(start, now)});
      last = now;
      if (seconds(begin, now) > run_seconds) break;
      for (int k = 0; k < 64; ++k, off = (off + 64) % bytes) sum += buf[off];
    }
    sinks[size_t(t)] = sum;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(stream, t);
  for (std::thread& th : pool) th.join();

  std::printf("%d threads streaming %llu MiB each for %.1f s; gaps over %.0f us:\n", threads,
              static_cast<unsigned long long>(bytes >> 20), run_seconds, kGapSeconds * 1e6);
  for (int t = 0; t < threads; ++t) {
    double total = 0, worst = 0;
    for (const Gap& g : gaps[size_t(t)]) {
      total += g.end - g.begin;
      worst = std::max(worst, g.end - g.begin);
    }
    // Time covered by a gap of this thread and a gap of any other thread at once.
    double shared = 0;
    for (const Gap& g : gaps[size_t(t)])
      for (int o = 0; o < threads; ++o)
        if (o != t)
          for (const Gap& h : gaps[size_t(o)])
            shared += std::max(0.0, std::min(g.end, h.end) - std::max(g.begin, h.begin));
    std::printf(
        "  thread %d: %zu gaps, %.1f%% of the time (mean %.0f us, worst %.0f us), %.1f%% "
        "of the time stalled together with another thread\n",
        t, gaps[size_t(t)].size(), 100 * total / run_seconds,
        gaps[size_t(t)].empty() ? 0.0 : total / double(gaps[size_t(t)].size()) * 1e6, worst * 1e6,
        100 * shared / run_seconds);
  }
  return sinks[0] == 1 ? 1 : 0;  // (keeps the reads)
}
