// What the CPU backend does, chosen when it is made (make_cpu_backend) and fixed for its life:
// the matrix-engine prefill GEMM (x86 AMX), how a load checks the prepacked-weight cache, and
// whether decode steps of several sequences run as lanes.
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
  // Decode steps of several sequences as lanes, a group of sequences a thread with no hand-offs
  // between ops (Backend::decode_lanes; --decode-lanes): kAuto times both forms as the steps
  // come and keeps the faster for each row count (backend/decode-lane-choice.h).
  enum class Lanes { kAuto, kOn, kOff };
  Lanes decode_lanes = Lanes::kAuto;
};

// --decode-lanes' names: "auto", "on", "off".
const char* lanes_name(CpuOptions::Lanes lanes);
std::optional<CpuOptions::Lanes> parse_lanes(std::string_view name);

// --cache-verify's names: "lazy", "sample", "full".
const char* cache_verify_name(CacheVerify::Mode mode);
std::optional<CacheVerify::Mode> parse_cache_verify(std::string_view name);

// "" when the options are usable, else one line naming the bad field.
std::string cpu_options_error(const CpuOptions& o);

}  // namespace hearth
