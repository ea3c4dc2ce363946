// The dtype table rows. Block byte counts follow ggml's block structs (see kernels/quant-blocks.h).
#include "tensor/dtype.h"

#include <strings.h>

#include <array>

#include "base/checked-math.h"

namespace hearth {

namespace {
// clang-format off
constexpr std::array<DTypeInfo, 21> kTable = {{
  {DType::F32,  "F32",  1,   4,   false, true},
  {DType::F16,  "F16",  1,   2,   false, true},
  {DType::Q4_0, "Q4_0", 32,  18,  true,  true},
  {DType::Q4_1, "Q4_1", 32,  20,  true,  true},
  {DType::Q5_0, "Q5_0", 32,  22,  true,  true},
  {DType::Q5_1, "Q5_1", 32,  24,  true,  true},
  {DType::Q8_0, "Q8_0", 32,  34,  true,  true},
  {DType::Q8_1, "Q8_1", 32,  36,  true,  false},
  {DType::Q2_K, "Q2_K", 256, 84,  true,  false},
  {DType::Q3_K, "Q3_K", 256, 110, true,  false},
  {DType::Q4_K, "Q4_K", 256, 144, true,  true},
  {DType::Q5_K, "Q5_K", 256, 176, true,  true},
  {DType::Q6_K, "Q6_K", 256, 210, true,  true},
  {DType::Q8_K, "Q8_K", 256, 292, true,  false},
  {DType::I8,   "I8",   1,   1,   false, false},
  {DType::I16,  "I16",  1,   2,   false, false},
  {DType::I32,  "I32",  1,   4,   false, false},
  {DType::I64,  "I64",  1,   8,   false, false},
  {DType::F64,  "F64",  1,   8,   false, false},
  {DType::BF16, "BF16", 1,   2,   false, true},
  {DType::MXFP4, "MXFP4", 32, 17,  true,  true},
}};
// clang-format on
}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  for (const auto& row : kTable)
    if (uint32_t(row.dtype) == id) return &row;
  return nullptr;
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const auto& row : kTable)
    if (strcasecmp(row.name, name.c_str()) == 0) return row.dtype;
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n % info.block_size != 0) return std::nullopt;
  return checked_mul(n / info.block_size, info.block_bytes);  // nullopt on overflow
}

}  // namespace hearth
