// libFuzzer entry point for the safetensors parser (also driven by replay-main.cpp in g++
// builds). On success it reads the first and last byte of every view.
#include <cstddef>
#include <cstdint>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = hearth::SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!r.is_ok()) {
    const std::string& m = r.message();
    if (m.rfind("fuzz.safetensors: ", 0) != 0 || m.find('\n') != std::string::npos)
      __builtin_trap();
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const hearth::TensorView& t : r->tensors()) {
    if (t.nbytes == 0) continue;  // empty tensors are legal here
    const auto* p = static_cast<const uint8_t*>(t.data);
    sink = sink ^ p[0] ^ p[t.nbytes - 1];
    if (r->find_tensor(t.name) != &t) __builtin_trap();
  }
  return 0;
}
