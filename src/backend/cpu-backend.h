// The CPU backend's factory with its options: threads, the prepacked-weight cache
// (backend/weight-cache.h) and the user's CpuOptions (backend/cpu-options.h).
// make_cpu_backend(n) in backend.h is the same with defaults.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/cpu-options.h"

namespace hearth {

struct CpuBackendOptions {
  int n_threads = 1;
  // Weights whose kernels want a repacked layout are packed at load; with a source identity
  // (base/mapped-file.h identity()) and the cache on, the packed bytes are cached on disk.
  bool use_weight_cache = true;
  std::string source_identity;  // "" = no cache (e.g. a directory of shards)
  std::string source_label;     // file name, for the cache file's name
  std::string cache_dir;        // "" = weight_cache_dir()
  CpuOptions cpu;               // AMX prefill and cache verification (valid: cpu_options_error)
  // Bytes of KV pages a decommit leaves parked for the next commit (backend/cpu-kv-memory.h);
  // nullopt: CpuKvMemory::default_parked_limit(), 0: none.
  std::optional<uint64_t> kv_parked_limit;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace hearth
