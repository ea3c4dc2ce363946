// hearth-decode-bench: decode-shaped matvecs (1 token) over a working set larger than the L3,
// packed layout vs the row kernels, each as % of a plain read of the same bytes in the same run.
// Usage: hearth-decode-bench [threads [MiB per type [reps [file|anon|huge [rows cols]]]]] ("file":
// packed copies in a file mapping, as the weight cache serves them; "huge": anonymous memory on
// 2 MiB pages). Extend: add a dtype to the
// loop in main.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/huge-buffer.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

using namespace hearth;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "huge": buffers on 2 MiB pages (as the CPU backend maps its weight cache), else 4 KiB pages.
bool g_huge = false;

// 64-byte aligned heap memory, or with g_huge fresh memory on 2 MiB pages (base/huge-buffer.h).
struct Aligned {
  std::unique_ptr<uint8_t, decltype(&std::free)> p{nullptr, std::free};
  HugeBuffer huge;
  explicit Aligned(uint64_t bytes) {
    if (g_huge)
      huge = HugeBuffer(bytes);
    else
      p.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  }
  uint8_t* get() const { return g_huge ? huge.get() : p.get(); }
};

// The bytes of `src` in a read-only private mapping of a file, as the CPU backend maps its
// weight cache (page-cache pages, 4 KiB), to compare against anonymous memory. Never unmapped.
const uint8_t* file_backed_copy(const uint8_t* src, uint64_t bytes, int index) {
  const std::string path =
      "/tmp/hearth-decode-bench-" + std::to_string(getpid()) + "-" + std::to_string(index) + ".bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return nullptr;
  ::unlink(path.c_str());
  for (uint64_t off = 0; off < bytes;) {
    const ssize_t w = ::write(fd, src + off, bytes - off);
    if (w <= 0) return nullptr;
    off += uint64_t(w);
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<const uint8_t*>(p);
}

// Sum of every 8-byte word, split over the pool: what streaming the bytes costs at best.
double read_seconds(const std::vector<const uint8_t*>& bufs, uint64_t bytes, ThreadPool& pool) {
  std::vector<uint64_t> sink(size_t(pool.size()) * 8, 0);
  const double t0 = now_s();
  for (const uint8_t* b : bufs)
    pool.parallel_for(int64_t(bytes / 4096), 1, [&](int64_t p0, int64_t p1) {
      const auto* w = reinterpret_cast<const uint64_t*>(b + p0 * 4096);
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (int64_t i = 0; i < (p1 - p0) * 512; i += 4) {
        a0 += w[i];
        a1 += w[i + 1];
        a2 += w[i + 2];
        a3 += w[i + 3];
      }
      sink[size_t(p0 % int64_t(sink.size()))] += a0 ^ a1 ^ a2 ^ a3;
    });
  const double s = now_s() - t0;
  uint64_t x = 0;
  for (uint64_t v : sink) x ^= v;
  if (x == 42) std::printf(" ");  // keeps the loads
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const uint64_t mib = argc > 2 ? uint64_t(std::atoll(argv[2])) : 1024;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  // "file": packed copies live in a file mapping (as the weight cache serves them).
  const bool file_backed = argc > 4 && std::string(argv[4]) == "file";
  g_huge = argc > 4 && std::string(argv[4]) == "huge";
  // Default: a TinyLlama FFN matrix; argv 5 and 6 pick another shape (rows, columns).
  const int64_t d = argc > 6 ? std::atoll(argv[5]) : 2048,
                n = argc > 6 ? std::atoll(argv[6]) : 5632;
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> wf(size_t(d * n)), x(static_cast<size_t>(n)), y(static_cast<size_t>(d));
  for (float& v : wf) v = nd(rng);
  for (float& v : x) v = nd(rng) * 20.f;
  std::printf("decode matvec %lldx%lld, %d threads, %llu MiB per type, best of %d (%s)\n",
              (long long)d, (long long)n, threads, (unsigned long long)mib, reps,
              kernels::active_kernel_table().name);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F16, DType::Q6_K}) {
    const uint64_t src_bytes = *row_bytes(t, uint64_t(n)) * uint64_t(d);
    std::vector<uint8_t> q(src_bytes);
    if (!kernels::quantize_rows(t, wf.data(), q.data(), d, n, nullptr).is_ok()) return 1;
    const int copies = int(std::max<uint64_t>(1, (mib << 20) / src_bytes));
    const auto pbytes = kernels::packed_size(t, d, n);
    std::vector<Aligned> src, packed;
    std::vector<const uint8_t*> src_ptrs, packed_ptrs;
    for (int c = 0; c < copies; ++c) {
      src.emplace_back(src_bytes);
      std::memcpy(src.back().get(), q.data(), src_bytes);
      src_ptrs.push_back(src.back().get());
      if (pbytes) {
        packed.emplace_back(*pbytes);
        TensorView w{"w", t, {d, n}, src.back().get(), src_bytes};
        kernels::pack_weight(w, packed.back().get(), pool);
        packed_ptrs.push_back(packed.back().get());
        if (file_backed) {
          packed_ptrs.back() = file_backed_copy(packed.back().get(), *pbytes, c);
          if (!packed_ptrs.back()) return 1;
        }
      }
    }
    double best_read = 1e9, best_rows = 1e9, best_packed = 1e9;
    for (int r = 0; r < reps; ++r) {
      best_read = std::min(best_read, read_seconds(src_ptrs, src_bytes, pool));
      double t0 = now_s();
      for (const uint8_t* b : src_ptrs) {
        TensorView w{"w", t, {d, n}, b, src_bytes};
        kernels::matmul(w, x.data(), 1, y.data(), pool);
      }
      best_rows = std::min(best_rows, now_s() - t0);
      if (pbytes) {
        t0 = now_s();
        for (const uint8_t* b : packed_ptrs)
          kernels::matmul_packed(t, b, d, n, x.data(), 1, y.data(), pool);
        best_packed = std::min(best_packed, now_s() - t0);
      }
    }
    const double total = double(src_bytes) * copies;
    std::printf("  %-5s read %6.2f GB/s | rows %6.2f GB/s (%3.0f%%)", dtype_name(t),
                total / best_read / 1e9, total / best_rows / 1e9, 100 * best_read / best_rows);
    if (pbytes)
      std::printf(" | packed %6.2f GB/s (%3.0f%%)", total / best_packed / 1e9,
                  100 * best_read / best_packed);
    std::printf("\n");
  }
  return 0;
}
