// Text that came from a file or a client, made safe to quote in an error message: errors reach
// logs and HTTP error bodies as one line each, so such text must not break or flood them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hearth {

// `text` with every control byte escaped (\n, \r, \t, \xNN), cut once the result holds
// `max_bytes` bytes, with "..." after the cut. Other bytes (UTF-8 included) pass unchanged.
std::string printable(std::string_view text, size_t max_bytes = 1000);

}  // namespace hearth
