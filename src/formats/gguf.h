// GGUF v2/v3 reader and writer. The reader validates every count, length, offset and type id
// against the file before use and returns a one-line error naming the file and the field.
// Tensors are zero-copy views into the mapped file. No architecture knowledge lives here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped-file.h"
#include "base/status.h"
#include "tensor/tensor-view.h"

namespace hearth {

// GGUF metadata value types (on-disk ids).
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars keep their on-disk type; arrays are homogeneous (GGUF forbids
// mixed arrays) and are stored decoded per element kind to keep 150k-entry vocabularies cheap.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  // Scalars: integers (signed or unsigned, widened), floats, bool, string.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  // Arrays: element type + exactly one of the vectors below filled (nested arrays go in `items`).
  GgufType elem_type = GgufType::UINT8;
  std::vector<int64_t> ints;          // any integer or bool element type
  std::vector<double> floats;         // FLOAT32/FLOAT64
  std::vector<std::string> strings;   // STRING
  std::vector<GgufValue> items;       // ARRAY of ARRAY
  uint64_t array_size() const;
};

class GgufFile {
 public:
  // mmaps and parses; the file stays mapped for the tensors' lifetime (tensors point into it).
  static Result<GgufFile> open(const std::string& path);
  // Parses a buffer the caller keeps alive (fuzzing, tests). `name` is used in error messages.
  static Result<GgufFile> parse(const uint8_t* data, uint64_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return name_; }
  const MappedFile* mapped() const { return file_.get(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed look-ups: nullopt when the key is absent; an error when it exists with a type that
  // cannot convert (e.g. a string where an integer is expected).
  Result<std::optional<std::string>> get_string(std::string_view key) const;
  Result<std::optional<int64_t>> get_int(std::string_view key) const;      // any integer type
  Result<std::optional<double>> get_float(std::string_view key) const;     // float or integer
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::vector<std::string>>> get_string_array(std::string_view key) const;
  Result<std::optional<std::vector<double>>> get_float_array(std::string_view key) const;
  Result<std::optional<std::vector<int64_t>>> get_int_array(std::string_view key) const;

  // Tensor views, shape outermost-first (GGUF's ne[] reversed).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes GGUF v3 files: metadata in insertion order, tensors aligned (general.alignment or 32).
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_value(const std::string& key, const GgufValue& v);  // copy any value (arrays too)
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // `shape` outermost-first; `bytes` must be exactly the tensor's byte size.
  void add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                  std::vector<uint8_t> bytes);
  // Like add_tensor, but the bytes stay with the caller (e.g. a mapped source file, so that
  // convert/quantize need not copy whole models) and must outlive write()/to_bytes().
  void add_tensor_ref(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      const void* data, uint64_t nbytes);

  // Checks what write() needs: unique keys and names, positive dims, byte sizes matching the
  // shape and dtype, a valid general.alignment. write() calls it; to_bytes() does not, so tests
  // can fabricate malformed files with it.
  Status validate() const;
  Status write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;  // the same bytes, in memory (tests, fuzz seeds)
  uint64_t alignment() const;             // general.alignment when set and valid, else 32

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    const uint8_t* ref = nullptr;  // add_tensor_ref: caller-owned bytes instead of `bytes`
    uint64_t ref_size = 0;
    const uint8_t* data() const { return ref ? ref : bytes.data(); }
    uint64_t size() const { return ref ? ref_size : bytes.size(); }
  };
  void set_scalar(const std::string& key, GgufValue v);
  // Streams the file's bytes to `sink` (false from the sink = stop); false when it failed.
  bool emit(const std::function<bool(const void*, uint64_t)>& sink) const;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace hearth
