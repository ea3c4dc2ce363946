// Byte-level builders for fabricating malformed GGUF and safetensors files in tests (the real
// writers refuse to produce them). Add a field writer here when a new bad-input case needs one.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hearth::test {

struct RawBytes {
  std::vector<uint8_t> b;
  template <class T>
  RawBytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof v);
    b.insert(b.end(), tmp, tmp + sizeof v);
    return *this;
  }
  RawBytes& u32(uint32_t v) { return put(v); }
  RawBytes& u64(uint64_t v) { return put(v); }
  RawBytes& str(const std::string& s) {
    u64(s.size());
    return bytes(s);
  }
  RawBytes& bytes(const std::string& s) {
    for (char c : s) b.push_back(uint8_t(c));  // (range insert trips a GCC 12 false warning)
    return *this;
  }
  RawBytes& pad_to(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  RawBytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

// GGUF header: magic, version, tensor count, kv count.
inline RawBytes gguf_header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  RawBytes r;
  r.bytes("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  return r;
}

// One tensor info; `ne` innermost-first as on disk.
inline void gguf_tensor_info(RawBytes& r, const std::string& name, std::vector<uint64_t> ne,
                             uint32_t type, uint64_t offset) {
  r.str(name).u32(uint32_t(ne.size()));
  for (uint64_t d : ne) r.u64(d);
  r.u32(type).u64(offset);
}

// A safetensors file from a header text and a data section of `data_bytes` zeros.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header, size_t data_bytes) {
  RawBytes r;
  r.u64(header.size()).bytes(header).zeros(data_bytes);
  return r.b;
}

}  // namespace hearth::test
