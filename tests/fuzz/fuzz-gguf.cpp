// libFuzzer entry point for the GGUF parser (also driven by replay-main.cpp in g++ builds).
// On success it touches every view and getter so ASan sees any out-of-range pointer.
#include <cstddef>
#include <cstdint>

#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = hearth::GgufFile::parse(data, size, "fuzz.gguf");
  if (!r.is_ok()) {
    // The contract: a non-empty, one-line message naming the file.
    const std::string& m = r.message();
    if (m.rfind("fuzz.gguf: ", 0) != 0 || m.find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const hearth::TensorView& t : r->tensors()) {
    if (t.nbytes == 0 || t.numel() <= 0) __builtin_trap();  // dims are validated positive
    const auto* p = static_cast<const uint8_t*>(t.data);
    sink = sink ^ p[0] ^ p[t.nbytes - 1];
    if (r->find_tensor(t.name) != &t) __builtin_trap();
  }
  for (const auto& [key, value] : r->metadata()) {
    (void)r->get_string(key);
    (void)r->get_int(key);
    (void)r->get_float(key);
    (void)r->get_bool(key);
    (void)r->get_string_array(key);
    (void)r->get_float_array(key);
    (void)r->get_int_array(key);
    sink = sink ^ uint8_t(value.array_size());
  }
  return 0;
}
