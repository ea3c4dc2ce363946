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

#include "base/atomic-file.h"
#include "base/mapped-file.h"
#include "base/status.h"
#include "tensor/tensor-view.h"

namespace hearth {

// GGUF metadata value types (on-disk ids).
// clang-format off
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
// clang-format on
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
  std::vector<int64_t> ints;         // any integer or bool element type
  std::vector<double> floats;        // FLOAT32/FLOAT64
  std::vector<std::string> strings;  // STRING
  std::vector<GgufValue> items;      // ARRAY of ARRAY
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
  Result<std::optional<int64_t>> get_int(std::string_view key) const;   // any integer type
  Result<std::optional<double>> get_float(std::string_view key) const;  // float or integer
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

class GgufEmitter;  // gguf-writer.cpp: the byte layout write(), to_bytes() and streams share
class GgufTensorStream;

// Writes GGUF v3 files: metadata in insertion order, tensors aligned (general.alignment or 32).
// Two ways to supply tensor data: hand it over up front (add_tensor, add_tensor_ref; then write()
// or to_bytes()), or declare tensors and stream their bytes one at a time (declare_tensor, then
// open_stream()), so converting a model holds one tensor in memory.
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
  // A tensor whose bytes come later, through the stream open_stream() returns. to_bytes() writes
  // zeros for it; write() refuses it.
  void declare_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape);

  // Checks what write() and open_stream() need: unique keys and names, positive dims, byte sizes
  // matching the shape and dtype, a valid general.alignment. to_bytes() does not check, so tests
  // can fabricate malformed files with it.
  Status validate() const;
  Status write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;  // the same bytes, in memory (tests, fuzz seeds)
  uint64_t alignment() const;             // general.alignment when set and valid, else 32

  // Writes the header (metadata and tensor infos) to `path`'s temporary; the stream then takes
  // each declared tensor's bytes in order. Every tensor must have been declared.
  Result<GgufTensorStream> open_stream(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    const uint8_t* ref = nullptr;  // add_tensor_ref: caller-owned bytes instead of `bytes`
    uint64_t ref_size = 0;         // add_tensor_ref: their size; declare_tensor: the shape's
    bool declared = false;         // declare_tensor: no bytes here, they are streamed
    const uint8_t* data() const { return ref ? ref : bytes.data(); }
    uint64_t size() const { return ref || declared ? ref_size : bytes.size(); }
  };
  void set_scalar(const std::string& key, GgufValue v);
  // The file's bytes through `e`: the header padded to the alignment, then (with_data) each
  // tensor's bytes, padded.
  void emit(GgufEmitter& e, bool with_data) const;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

// One declared tensor as the stream will write it (shape outermost-first).
struct GgufTensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;  // from dtype and shape
};

// The data section of a GGUF file being written by GgufWriter::open_stream. The file appears
// under its name only after finish(); a stream dropped before that removes its temporary.
class GgufTensorStream {
 public:
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The next tensor's bytes, exactly its nbytes; errors name the file and the tensor.
  Status write_tensor(const void* data, uint64_t nbytes);
  // Checks that every tensor was written, then renames the file into place.
  Status finish();

 private:
  friend class GgufWriter;
  GgufTensorStream(AtomicFile file, std::vector<GgufTensorInfo> tensors, uint64_t alignment)
      : file_(std::move(file)), tensors_(std::move(tensors)), alignment_(alignment) {}
  AtomicFile file_;
  std::vector<GgufTensorInfo> tensors_;
  uint64_t alignment_;
  size_t next_ = 0;
};

}  // namespace hearth
