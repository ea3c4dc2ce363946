// Just enough GGUF and safetensors reading for the quantizer tests: tensor name -> bytes, dtype,
// shape. Kept inside tests/ops so the kernel tests (and the ARM cross-build) need no formats/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hearth::test {

struct RawTensor {
  uint32_t type = 0;           // ggml type id (GGUF) or 0/1/30 for F32/F16/BF16 (safetensors)
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

struct RawTensorFile {
  std::string bytes;  // the whole file
  std::map<std::string, RawTensor> tensors;
};

// Both return an empty map plus a message in *error when the file is missing or malformed.
RawTensorFile read_gguf_tensors(const std::string& path, std::string* error);
RawTensorFile read_safetensors(const std::string& path, std::string* error);

// Row r of an f32/f16/bf16 tensor with n columns -> f32.
std::vector<float> float_row(const RawTensor& t, int64_t r);

}  // namespace hearth::test
