// The dtype table: every tensor element type Hearth knows, with ggml's numeric ids (the GGUF
// on-disk ids) and block layouts. Adding a type = one row in dtype.cpp + kernels for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hearth {

// Values are ggml's type ids, as stored in GGUF tensor infos. Do not renumber.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,  // OCP microscaling FP4 (E2M1 x E8M0 block scale): gpt-oss's experts
};

struct DTypeInfo {
  DType dtype;
  const char* name;      // "Q4_K", as llama.cpp prints it
  uint32_t block_size;   // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
  bool quantized;
  // Whether the model path can compute with this type (some ids are known but not runnable).
  bool runnable;
};

// nullptr for an id that is not in the table (the caller reports "unknown type id N").
const DTypeInfo* dtype_info(uint32_t ggml_id);
inline const DTypeInfo& dtype_info(DType t) {
  return *dtype_info(uint32_t(t));
}
inline const char* dtype_name(DType t) {
  return dtype_info(t).name;
}
std::optional<DType> dtype_from_name(const std::string& name);  // case-insensitive

// Bytes of a row of n elements; nullopt when n is not a multiple of the block size or the
// byte count overflows 64 bits.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

}  // namespace hearth
