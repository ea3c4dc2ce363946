// What the CPU backend does, chosen when it is made (make_cpu_backend) and fixed for its life:
// the matrix-engine prefill GEMM (x86 AMX) and how a load checks the prepacked-weight cache.
// The defaults are the measured choices (docs/performance.md). A new choice: a field here with
// the current behaviour as its default, handed down as a parameter — never an environment
// variable.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "backend/weight-cache.h"
#include "kernels/ops.h"

namespace hearth {

struct CpuOptions {
  // Prefill matmuls on the matrix engine (--no-amx turns it off, --amx-min-tokens N sets the
  // token count it starts from for every weight type; 0 keeps the measured per-type one).
  kernels::MatrixEngineOptions amx;
  // How much of a cached payload a load checks before using it (--cache-verify).
  CacheVerify::Mode cache_verify = CacheVerify::Mode::kLazy;
};

// --cache-verify's names: "lazy", "sample", "full".
const char* cache_verify_name(CacheVerify::Mode mode);
std::optional<CacheVerify::Mode> parse_cache_verify(std::string_view name);

// "" when the options are usable, else one line naming the bad field.
std::string cpu_options_error(const CpuOptions& o);

}  // namespace hearth
