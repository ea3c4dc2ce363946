// Machine probes for `hearth bench`: bandwidth, peak compute, RAPL, RSS, page-cache dropping.
// SIMD loops carry target attributes and run only when cpuid has the ISA (the rest is baseline).
#include "machine-probe.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include "base/cpu-features.h"
#include "base/huge-buffer.h"
#include "base/thread-pool.h"

namespace hearth::bench {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sums 64-bit lanes so the loads cannot be optimised away; 4 independent accumulators keep
// several cache lines in flight.
// Sums every 8-byte word of [p, p + n), read as `streams` equal parts side by side (one
// 256-byte step of each per round): several sequential streams per core keep more of the L2
// streamer busy than one, so the probe takes the best of one and four.
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, uint64_t n, int streams) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const uint64_t part = n / uint64_t(streams) / 256 * 256;
  for (uint64_t i = 0; i < part; i += 256)
    for (int s = 0; s < streams; ++s) {
      const uint8_t* q = p + uint64_t(s) * part + i;
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(q));
      a1 = _mm512_add_epi64(a1, _mm512_load_si512(q + 64));
      a2 = _mm512_add_epi64(a2, _mm512_load_si512(q + 128));
      a3 = _mm512_add_epi64(a3, _mm512_load_si512(q + 192));
    }
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  return uint64_t(_mm512_reduce_add_epi64(s));
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, uint64_t n, int streams) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const uint64_t part = n / uint64_t(streams) / 128 * 128;
  for (uint64_t i = 0; i < part; i += 128)
    for (int s = 0; s < streams; ++s) {
      const auto* q = reinterpret_cast<const __m256i*>(p + uint64_t(s) * part + i);
      a0 = _mm256_add_epi64(a0, _mm256_load_si256(q));
      a1 = _mm256_add_epi64(a1, _mm256_load_si256(q + 1));
      a2 = _mm256_add_epi64(a2, _mm256_load_si256(q + 2));
      a3 = _mm256_add_epi64(a3, _mm256_load_si256(q + 3));
    }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t read_scalar(const uint8_t* p, uint64_t n, int streams) {
  uint64_t s0 = 0, s1 = 0;
  const uint64_t part = n / uint64_t(streams) / 16 * 16;
  for (uint64_t i = 0; i < part; i += 16)
    for (int s = 0; s < streams; ++s) {
      uint64_t a, b;
      std::memcpy(&a, p + uint64_t(s) * part + i, 8);
      std::memcpy(&b, p + uint64_t(s) * part + i + 8, 8);
      s0 += a;
      s1 += b;
    }
  return s0 + s1;
}

// Chains of dependent FMAs, 12 independent ones: enough to cover 4-cycle latency on 2 ports.
__attribute__((target("avx512f"))) float fma_avx512(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int vnni_avx512(int64_t iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
  __m512i t = acc[0];
  for (int i = 1; i < 12; ++i) t = _mm512_add_epi32(t, acc[i]);
  return _mm512_reduce_add_epi32(t);
}

__attribute__((target("avx2,avxvnni"))) int vnni_avx2(int64_t iters) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], u, s);
  alignas(32) int32_t out[8];
  __m256i t = acc[0];
  for (int i = 1; i < 12; ++i) t = _mm256_add_epi32(t, acc[i]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), t);
  return int(uint32_t(out[0]) + uint32_t(out[7]));  // (the sums wrap: only kept alive)
}

// AMX: 4 independent TDPBF16PS (16 x 16 x 32 bf16 products each) per iteration on register-
// resident tiles; the tile state is configured and released inside, per calling thread.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
__attribute__((target("amx-tile,amx-bf16"))) float amx_bf16(int64_t iters) {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  alignas(64) uint16_t ab[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) ab[i] = 0x3C00;  // bf16 1/128: sums stay finite
  alignas(64) float c[16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

// Runs fn(iters) on every thread, doubling iters until one pass takes >= 0.1 s; returns the
// aggregate rate in G(ops)/s given ops per iteration per thread.
template <class Fn>
double aggregate_rate(ThreadPool& pool, double ops_per_iter, Fn fn) {
  std::atomic<int> sink{0};
  for (int64_t iters = 1 << 16;; iters *= 2) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int, int) { sink += int(fn(iters)); });
    const double s = seconds_since(t0);
    if (s >= 0.1 || iters >= (int64_t(1) << 34))
      return ops_per_iter * double(iters) * pool.size() / s / 1e9;
  }
}

}  // namespace

double measure_read_bandwidth(int threads, uint64_t bytes, int passes) {
  threads = std::max(1, threads);
  bytes = std::max<uint64_t>(bytes / (256u * uint64_t(threads)), 1) * 256u * uint64_t(threads);
  // On 2 MiB pages, as the weights are mapped (base/mapped-file.cpp): the roofline is what the
  // machine can stream, not what 4 KiB pages let through.
  std::optional<HugeBuffer> buf;
  try {
    buf.emplace(bytes);
  } catch (const std::bad_alloc&) {
    return 0;
  }
  ThreadPool pool(threads);
  const CpuFeatures& f = cpu_features();
  const uint64_t slice = bytes / uint64_t(threads);
  // First touch from the reading thread places pages near it (matters on multi-socket hosts).
  pool.run([&](int t, int) { std::memset(buf->get() + uint64_t(t) * slice, t + 1, slice); });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int streams : {1, 4})
    for (int pass = 0; pass <= passes; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run([&](int t, int) {
        const uint8_t* p = buf->get() + uint64_t(t) * slice;
        sink += f.avx512f ? read_avx512(p, slice, streams)
                : f.avx2  ? read_avx2(p, slice, streams)
                          : read_scalar(p, slice, streams);
      });
      const double gbs = double(bytes) / seconds_since(t0) / 1e9;
      if (pass > 0) best = std::max(best, gbs);  // pass 0 warms the TLB and caches
    }
  return best;
}

PeakCompute measure_peak_compute(int threads, std::string_view kernels) {
  ThreadPool pool(std::max(1, threads));
  const CpuFeatures& f = cpu_features();
  PeakCompute p;
  if (f.avx512f && kernels == "avx512") {
    p.isa = "avx512";
    p.f32_gflops = aggregate_rate(pool, 12 * 16 * 2, [](int64_t n) { return fma_avx512(n); });
    if (f.avx512bw && f.avx512_vnni)
      p.int8_gops = aggregate_rate(pool, 12 * 64 * 2, [](int64_t n) { return vnni_avx512(n); });
    if (f.amx_tile && f.amx_bf16 && request_amx_permission())
      p.amx_bf16_gflops =
          aggregate_rate(pool, 4 * 16 * 16 * 32 * 2, [](int64_t n) { return amx_bf16(n); });
  } else if (f.avx2 && f.fma && (kernels == "avx2" || kernels == "avx-vnni")) {
    p.isa = "avx2";
    p.f32_gflops = aggregate_rate(pool, 12 * 8 * 2, [](int64_t n) { return fma_avx2(n); });
    if (f.avx_vnni && kernels == "avx-vnni") {
      p.isa = "avx-vnni";
      p.int8_gops = aggregate_rate(pool, 12 * 32 * 2, [](int64_t n) { return vnni_avx2(n); });
    }
  } else {
    p.isa = "scalar";
    p.f32_gflops = aggregate_rate(pool, 2, [](int64_t n) {
      volatile float a = 1.f;
      float x = a;
      for (int64_t i = 0; i < n; ++i) x = x * 0.999999f + 1e-7f;
      return x;
    });
  }
  return p;
}

EnergyReading read_energy() {
  EnergyReading r;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = "/sys/class/powercap";
  if (!fs::is_directory(root, ec)) return r;
  double total = 0, range = 0;
  bool any = false;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    // Package domains only ("intel-rapl:0"); sub-domains ("intel-rapl:0:0") are inside them.
    if (name.rfind("intel-rapl:", 0) != 0 || name.find(':', 11) != std::string::npos) continue;
    std::ifstream energy(e.path() / "energy_uj"), max_range(e.path() / "max_energy_range_uj");
    double uj = 0, max_uj = 0;
    if (!(energy >> uj)) continue;
    if (max_range >> max_uj) range += max_uj * 1e-6;
    total += uj * 1e-6;
    any = true;
  }
  if (any) {
    r.joules = total;
    r.range_j = range;
  }
  return r;
}

std::optional<double> energy_delta_j(const EnergyReading& before, const EnergyReading& after) {
  if (!before.joules || !after.joules) return std::nullopt;
  double d = *after.joules - *before.joules;
  if (d < 0 && after.range_j > 0) d += after.range_j;  // one wrap of the counter
  if (d < 0) return std::nullopt;
  return d;
}

namespace {
uint64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, klen, key) == 0) return std::strtoull(line.c_str() + klen, nullptr, 10);
  return 0;
}
}  // namespace

uint64_t peak_rss_bytes() {
  return status_kb("VmHWM:") * 1024;
}

uint64_t current_rss_bytes() {
  return status_kb("VmRSS:") * 1024;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

namespace {

// Fraction of `fd`'s pages in the page cache (mincore over a fresh mapping); 1 when unknown.
double resident_fraction(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return 1;
  if (st.st_size == 0) return 0;
  const size_t size = size_t(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 1;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  double frac = 1;
  if (::mincore(p, size, in.data()) == 0) {
    size_t resident = 0;
    for (unsigned char c : in) resident += c & 1;
    frac = double(resident) / double(in.size());
  }
  ::munmap(p, size);
  return frac;
}

}  // namespace

std::string drop_file_cache(const std::string& path, bool allow_drop_caches) {
  // The file's own pages first (posix_fadvise DONTNEED): other processes' page cache stays.
  // A Hugging Face directory: every file in it (config, tokenizer and safetensors shards).
  std::vector<std::string> files;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
  } else {
    files.push_back(path);
  }
  bool opened = !files.empty(), dropped = opened;
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) {
      opened = dropped = false;
      continue;
    }
    ::fdatasync(fd);
    // Pages still mapped by a live process stay: callers unload the model first. mincore says
    // whether the advice took (some filesystems ignore it).
    dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 &&
              resident_fraction(fd) <= 0.01 && dropped;
    ::close(fd);
  }
  if (dropped) return "fadvise";
  // Last resort, where permitted (root): the whole page cache, every process's.
  if (opened && allow_drop_caches) {
    ::sync();
    std::ofstream dc("/proc/sys/vm/drop_caches");
    if (dc && (dc << "1") && dc.flush()) return "drop_caches";
  }
  return "none";
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown CPU";
}

}  // namespace hearth::bench
