// Counts a request (or a stream it started) as in flight until destroyed: /metrics reports the
// count and the drain waits for it to reach zero before closing connections.
#pragma once

#include <atomic>

namespace hearth::server {

struct InFlight {
  std::atomic<int>* n;
  explicit InFlight(std::atomic<int>* c) : n(c) { n->fetch_add(1); }
  ~InFlight() { n->fetch_sub(1); }
  InFlight(const InFlight&) = delete;
};

}  // namespace hearth::server
