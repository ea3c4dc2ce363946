// The chat web page (web/chat.html), embedded into the binary at build time by embed-file.cmake
// so `hearth serve` needs no files beside it. Edit the HTML; the build regenerates the bytes.
#pragma once

#include <cstddef>

namespace hearth::server {

extern const char kChatPage[];
extern const size_t kChatPageSize;

}  // namespace hearth::server
