// What the machine can do, measured by `hearth bench` in the same run as the model figures:
// streaming read bandwidth, peak f32 FMA and int8 dot throughput, RAPL energy, peak RSS.
// A backend with its own device (GPU) reports through DeviceReport (bench-report.h) instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hearth::bench {

// GB/s of a multi-threaded streaming read over `bytes` (make it several times the LLC), best of
// `passes` passes after one warm-up pass that also faults the pages in.
double measure_read_bandwidth(int threads, uint64_t bytes, int passes = 3);

// Peak arithmetic on `threads` threads from short register-resident loops: f32 FLOP/s with
// FMA (2 per lane) and int8 op/s with VNNI dot products (2 per multiply-add), in G/s.
// The instructions are those of the kernel table the run uses (`kernels`: its name, so a run
// capped with HEARTH_ISA=avx2 is measured against ymm peaks); 0 where it has none (int8 on
// plain AVX2).
struct PeakCompute {
  double f32_gflops = 0;
  double int8_gops = 0;
  double amx_bf16_gflops = 0;  // AMX TDPBF16PS (bf16 x bf16 -> f32), 0 without usable AMX
  std::string isa;             // "avx512", "avx-vnni", "avx2", "scalar"
};
PeakCompute measure_peak_compute(int threads, std::string_view kernels);

// Cumulative package energy in joules from RAPL powercap (intel-rapl:N domains summed), or
// nullopt when the machine does not expose it readably. Wrap-around is handled by the caller
// taking differences through energy_delta_j.
struct EnergyReading {
  std::optional<double> joules;  // sum over package domains
  double range_j = 0;            // wrap range of the counters (max_energy_range_uj)
};
EnergyReading read_energy();
std::optional<double> energy_delta_j(const EnergyReading& before, const EnergyReading& after);

// Peak resident set (VmHWM) of this process in bytes, and a reset of that peak
// (/proc/self/clear_refs); reset returns false where the kernel refuses it.
uint64_t peak_rss_bytes();
uint64_t current_rss_bytes();
bool reset_peak_rss();

// Evicts `path` from the page cache so the next load reads from disk: posix_fadvise(DONTNEED)
// on the file (checked with mincore), else drop_caches when writable (root; it empties every
// process's page cache, so only when the targeted drop did not take). Returns the method used,
// or "none" when the file's pages could not be dropped (the next load is then a first load).
// allow_drop_caches = false skips the system-wide drop (tests: other processes' caches stay).
std::string drop_file_cache(const std::string& path, bool allow_drop_caches = true);

// One-line CPU description from /proc/cpuinfo ("Intel(R) Xeon(R) ... x 2 threads").
std::string cpu_model_name();

}  // namespace hearth::bench
