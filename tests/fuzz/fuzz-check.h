// The contract every fuzzed parser keeps on bad input: an error, never a crash, and its message
// one line that is not empty (it reaches logs, `hearth: error:` lines and HTTP bodies).
#pragma once

#include <string>

template <class R>
void fuzz_check_error(const R& r) {
  if (!r.is_ok() && (r.message().empty() || r.message().find('\n') != std::string::npos))
    __builtin_trap();
}
