// A GGUF v3 writer that streams tensor data: the header (metadata + tensor infos) is written up
// front from the planned dtypes and shapes, then each tensor's bytes as they are produced, so
// converting a model holds one tensor in memory. The file appears (renamed) only when complete.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "formats/gguf.h"
#include "tensor/tensor-view.h"

namespace hearth::convert {

// Metadata in write order; helpers build values the way GgufWriter's setters do.
using Metadata = std::vector<std::pair<std::string, GgufValue>>;
void put(Metadata& m, const std::string& key, GgufValue v);  // replaces in place when present
GgufValue value_u32(uint32_t v);
GgufValue value_i32(int32_t v);
GgufValue value_f32(float v);
GgufValue value_bool(bool v);
GgufValue value_string(const std::string& v);
GgufValue value_strings(const std::vector<std::string>& v);
GgufValue value_f32s(const std::vector<float>& v);
GgufValue value_i32s(const std::vector<int32_t>& v);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // outermost-first
  uint64_t nbytes = 0;         // filled by GgufStream::open from dtype and shape
};

class GgufStream {
 public:
  GgufStream() = default;
  GgufStream(GgufStream&& o) noexcept;
  GgufStream& operator=(GgufStream&&) = delete;
  ~GgufStream();  // an unfinished stream removes its temporary file

  // Writes the header to `path`.tmp. Errors name `path` and the tensor or key at fault.
  static Result<GgufStream> open(const std::string& path, const Metadata& metadata,
                                 std::vector<TensorInfo> tensors);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Tensors must be written in order, each with exactly its planned byte count.
  Status write_tensor(size_t index, const void* data, uint64_t nbytes);
  // Flushes, closes and renames the file into place.
  Status finish();

 private:
  Status write_raw(const void* p, uint64_t n);
  Status pad();
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  std::vector<TensorInfo> tensors_;
  uint64_t alignment_ = 32;
  uint64_t pos_ = 0;
  size_t next_ = 0;
};

}  // namespace hearth::convert
