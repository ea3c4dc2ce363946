// GGUF v2/v3 reader: a bounds-checked cursor over the mapped bytes, metadata decoding, tensor
// infos and the checks between them. To accept a new on-disk field, read it through Cursor.
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

#include "base/checked-math.h"
#include "formats/gguf.h"

namespace hearth {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxNesting = 8;           // arrays of arrays deeper than this are not real files
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS

std::string u64s(uint64_t v) {
  return std::to_string(v);
}

// Printable form of a name read from the file, for error messages (keeps them one line).
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 96)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (s.size() > 96) out += "...";
  return out;
}

// Fixed on-disk size of a scalar metadata type; 0 for STRING/ARRAY (variable) and unknown ids.
uint64_t scalar_size(uint32_t t) {
  switch (GgufType(t)) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

// Smallest number of bytes one element of type `t` occupies on disk; bounds array counts.
uint64_t min_element_size(uint32_t t) {
  if (t == uint32_t(GgufType::STRING)) return 8;  // u64 length, possibly empty
  if (t == uint32_t(GgufType::ARRAY)) return 12;  // u32 element type + u64 count
  return scalar_size(t);
}

// Reads little-endian values from [data, data + size); every read is checked against the end.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t size() const { return size_; }

  // `what` names the field for the error ("tensor count", "key 'general.name'").
  template <class T>
  Status read(T* out, const std::string& what) {
    if (remaining() < sizeof(T))
      return Status::error(what + ": needs " + u64s(sizeof(T)) + " bytes at offset " + u64s(pos_) +
                           ", past end of file (size " + u64s(size_) + ")");
    std::memcpy(out, data_ + pos_, sizeof(T));  // memcpy: the file gives no alignment
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const std::string& what) {
    uint64_t len = 0;
    HEARTH_TRY(read(&len, what + " length"));
    if (len > remaining())
      return Status::error(what + ": string length " + u64s(len) + " at offset " + u64s(pos_ - 8) +
                           " extends past end of file (size " + u64s(size_) + ")");
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Status read_value(Cursor& c, uint32_t type, GgufValue* out, const std::string& what, int depth);

// Reads `count` elements of a non-array type into the matching vector of `out`.
Status read_array_elems(Cursor& c, uint32_t elem, uint64_t count, GgufValue* out,
                        const std::string& what, int depth) {
  const GgufType et = GgufType(elem);
  if (et == GgufType::STRING) {
    out->strings.resize(count);
    for (uint64_t i = 0; i < count; ++i)  // index named only on failure: vocabularies are big
      if (Status s = c.read_string(&out->strings[i], what); !s)
        return Status::error("element " + u64s(i) + " of " + s.message());
    return Status::ok();
  }
  if (et == GgufType::ARRAY) {
    if (depth >= kMaxNesting)
      return Status::error(what + ": arrays nested deeper than " + std::to_string(kMaxNesting));
    out->items.resize(count);
    for (uint64_t i = 0; i < count; ++i)
      if (Status s = read_value(c, elem, &out->items[i], what, depth + 1); !s)
        return Status::error("element " + u64s(i) + " of " + s.message());
    return Status::ok();
  }
  // Scalars: decode each through a one-element read so that the same conversion rules apply.
  const bool floaty = et == GgufType::FLOAT32 || et == GgufType::FLOAT64;
  if (floaty)
    out->floats.reserve(count);
  else
    out->ints.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    GgufValue v;
    HEARTH_TRY(read_value(c, elem, &v, what, depth + 1));
    if (floaty)
      out->floats.push_back(v.f);
    else
      out->ints.push_back(v.i);
  }
  return Status::ok();
}

// A scalar number: integers fill both `i` and `u` (same bits), floats fill `f`.
template <class T>
Status read_number(Cursor& c, GgufValue* out, const std::string& what) {
  T v;
  HEARTH_TRY(c.read(&v, what));
  if constexpr (std::is_floating_point_v<T>) {
    out->f = v;
  } else if constexpr (std::is_signed_v<T>) {
    out->i = v;
    out->u = uint64_t(out->i);
  } else {
    out->u = v;
    out->i = int64_t(v);
  }
  return Status::ok();
}

Status read_value(Cursor& c, uint32_t type, GgufValue* out, const std::string& what, int depth) {
  out->type = GgufType(type);
  switch (GgufType(type)) {
    case GgufType::UINT8:
      return read_number<uint8_t>(c, out, what);
    case GgufType::INT8:
      return read_number<int8_t>(c, out, what);
    case GgufType::UINT16:
      return read_number<uint16_t>(c, out, what);
    case GgufType::INT16:
      return read_number<int16_t>(c, out, what);
    case GgufType::UINT32:
      return read_number<uint32_t>(c, out, what);
    case GgufType::INT32:
      return read_number<int32_t>(c, out, what);
    // UINT64 values above INT64_MAX keep their bits in `i`; get_int() refuses them.
    case GgufType::UINT64:
      return read_number<uint64_t>(c, out, what);
    case GgufType::INT64:
      return read_number<int64_t>(c, out, what);
    case GgufType::FLOAT32:
      return read_number<float>(c, out, what);
    case GgufType::FLOAT64:
      return read_number<double>(c, out, what);
    case GgufType::BOOL: {
      uint8_t v;
      HEARTH_TRY(c.read(&v, what));
      if (v > 1)
        return Status::error(what + ": bool value " + std::to_string(v) + " is not 0 or 1");
      out->b = v != 0;
      out->i = v;
      out->u = v;
      break;
    }
    case GgufType::STRING:
      HEARTH_TRY(c.read_string(&out->s, what));
      break;
    case GgufType::ARRAY: {
      uint32_t elem = 0;
      uint64_t count = 0;
      HEARTH_TRY(c.read(&elem, what + " element type"));
      if (elem > uint32_t(GgufType::FLOAT64))
        return Status::error(what + ": unknown array element type " + std::to_string(elem));
      HEARTH_TRY(c.read(&count, what + " element count"));
      // Every element needs at least min_element_size bytes, so a count the rest of the file
      // cannot hold is a lie: refuse it before reserving memory for it.
      const uint64_t min_size = min_element_size(elem);
      if (count > c.remaining() / min_size)
        return Status::error(what + ": array of " + u64s(count) + " " +
                             gguf_type_name(GgufType(elem)) + " elements at offset " +
                             u64s(c.pos() - 8) + " extends past end of file (size " +
                             u64s(c.size()) + ")");
      out->elem_type = GgufType(elem);
      HEARTH_TRY(read_array_elems(c, elem, count, out, what, depth));
      break;
    }
    default:
      return Status::error(what + ": unknown metadata value type " + std::to_string(type));
  }
  return Status::ok();
}

std::string type_mismatch(std::string_view key, GgufType got, const char* want) {
  return "metadata key '" + std::string(key) + "' has type " + gguf_type_name(got) + ", expected " +
         want;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
      return "UINT8";
    case GgufType::INT8:
      return "INT8";
    case GgufType::UINT16:
      return "UINT16";
    case GgufType::INT16:
      return "INT16";
    case GgufType::UINT32:
      return "UINT32";
    case GgufType::INT32:
      return "INT32";
    case GgufType::FLOAT32:
      return "FLOAT32";
    case GgufType::BOOL:
      return "BOOL";
    case GgufType::STRING:
      return "STRING";
    case GgufType::ARRAY:
      return "ARRAY";
    case GgufType::UINT64:
      return "UINT64";
    case GgufType::INT64:
      return "INT64";
    case GgufType::FLOAT64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

uint64_t GgufValue::array_size() const {
  if (type != GgufType::ARRAY) return 0;
  switch (elem_type) {
    case GgufType::STRING:
      return strings.size();
    case GgufType::ARRAY:
      return items.size();
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      return floats.size();
    default:
      return ints.size();
  }
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto file = std::make_shared<MappedFile>(std::move(mapped));
  HEARTH_ASSIGN_OR_RETURN(GgufFile g, parse(file->data(), file->size(), path));
  g.file_ = std::move(file);  // the views point into this mapping; keep it alive with them
  return g;
}

Result<GgufFile> GgufFile::parse(const uint8_t* data, uint64_t size, const std::string& name) {
  static const uint8_t kEmpty[1] = {0};
  if (!data) data = kEmpty;  // an empty mapping has no pointer; the cursor never reads it
  Cursor c(data, size);
  GgufFile g;
  g.name_ = name;
  auto fail = [&](const std::string& msg) -> Result<GgufFile> {
    return Status::error(name + ": " + msg);
  };
  auto failed = [&](const Status& s) -> Result<GgufFile> { return s.with_context(name); };

  // Header.
  uint32_t magic = 0;
  if (size < 4)
    return fail("magic: file is " + u64s(size) + " bytes, too short to be GGUF (expected 'GGUF')");
  HEARTH_TRY(c.read(&magic, "magic"));
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", data[0], data[1], data[2], data[3]);
    return fail(std::string("magic: not a GGUF file (first bytes ") + buf +
                ", expected 47 47 55 46 'GGUF')");
  }
  if (Status s = c.read(&g.version_, "version"); !s) return failed(s);
  if (g.version_ == 1)
    return fail("version: GGUF v1 is not supported (only v2 and v3); re-convert the model");
  if (g.version_ != 2 && g.version_ != 3) {
    if (g.version_ == 0x02000000u || g.version_ == 0x03000000u)
      return fail("version: big-endian GGUF is not supported");
    return fail("version: unsupported GGUF version " + std::to_string(g.version_) +
                " (expected 2 or 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (Status s = c.read(&n_tensors, "tensor count"); !s) return failed(s);
  if (Status s = c.read(&n_kv, "metadata kv count"); !s) return failed(s);
  // Each key/value needs >= 13 bytes (key length, type, 1-byte value) and each tensor info
  // >= 24 (name length, n_dims, type, offset): counts the file cannot hold are refused here.
  if (n_kv > c.remaining() / 13)
    return fail("metadata kv count: " + u64s(n_kv) + " entries cannot fit in the " +
                u64s(c.remaining()) + " bytes left in the file");
  if (n_tensors > c.remaining() / 24)
    return fail("tensor count: " + u64s(n_tensors) + " tensors cannot fit in the " +
                u64s(c.remaining()) + " bytes left in the file");

  // Metadata.
  g.kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    if (Status s = c.read_string(&key, "metadata key #" + u64s(i)); !s) return failed(s);
    const std::string what = "metadata key '" + printable(key) + "'";
    if (key.empty()) return fail("metadata key #" + u64s(i) + ": empty key");
    if (g.kv_index_.count(key)) return fail(what + ": duplicate key");
    uint32_t type = 0;
    if (Status s = c.read(&type, what + " type"); !s) return failed(s);
    GgufValue v;
    if (Status s = read_value(c, type, &v, what, 0); !s) return failed(s);
    g.kv_index_.emplace(key, g.kv_.size());
    g.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    if (!is_integer_type(a->type))
      return fail(std::string("general.alignment: has type ") + gguf_type_name(a->type) +
                  ", expected an integer");
    const bool negative = a->i < 0 && a->type != GgufType::UINT64;
    if (negative || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 30))
      return fail("general.alignment: " + std::to_string(a->i) +
                  " is not a power of two between 1 and 2^30");
    g.alignment_ = a->u;
  }

  // Tensor infos.
  struct Info {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, nbytes;
  };
  std::vector<Info> infos;
  infos.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info t;
    if (Status s = c.read_string(&t.name, "tensor #" + u64s(i) + " name"); !s) return failed(s);
    const std::string what = "tensor '" + printable(t.name) + "'";
    if (t.name.empty()) return fail("tensor #" + u64s(i) + ": empty name");
    if (g.tensor_index_.count(t.name)) return fail(what + ": duplicate tensor name");
    g.tensor_index_.emplace(t.name, i);
    uint32_t n_dims = 0;
    if (Status s = c.read(&n_dims, what + " n_dims"); !s) return failed(s);
    if (n_dims > kMaxDims)
      return fail(what + ": n_dims " + std::to_string(n_dims) + " exceeds " +
                  std::to_string(kMaxDims));
    uint64_t ne[kMaxDims] = {1, 1, 1, 1};
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (Status s = c.read(&ne[d], what + " ne[" + std::to_string(d) + "]"); !s) return failed(s);
      if (ne[d] == 0 || ne[d] > uint64_t(std::numeric_limits<int64_t>::max()))
        return fail(what + ": dimension ne[" + std::to_string(d) +
                    "] = " + std::to_string(int64_t(ne[d])) + " must be positive");
      auto p = checked_mul(numel, ne[d]);
      if (!p || *p > uint64_t(std::numeric_limits<int64_t>::max()))
        return fail(what + ": element count of dimensions overflows 64 bits");
      numel = *p;
    }
    uint32_t type_id = 0;
    if (Status s = c.read(&type_id, what + " type"); !s) return failed(s);
    const DTypeInfo* info = dtype_info(type_id);
    if (!info)
      return fail("unknown tensor type id " + std::to_string(type_id) + " (" + printable(t.name) +
                  ")");
    t.dtype = info->dtype;
    if (Status s = c.read(&t.offset, what + " offset"); !s) return failed(s);
    if (ne[0] % info->block_size != 0)
      return fail(what + ": row length " + u64s(ne[0]) + " is not a multiple of the " + info->name +
                  " block size " + std::to_string(info->block_size));
    // Same as row_bytes(), but overflow-checked: ne0 comes straight from the file.
    auto row = checked_mul(ne[0] / info->block_size, info->block_bytes);
    auto nbytes = row ? checked_mul(*row, numel / ne[0]) : std::nullopt;
    if (!nbytes) return fail(what + ": byte size overflows 64 bits");
    t.nbytes = *nbytes;
    // ggml stores ne[] innermost-first; Hearth's convention is outermost-first.
    for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(int64_t(ne[d]));
    infos.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the infos.
  const uint64_t pad = (g.alignment_ - c.pos() % g.alignment_) % g.alignment_;
  g.data_offset_ = c.pos() + pad;  // cannot overflow: pos <= size and pad < 2^30

  for (const Info& t : infos) {
    const std::string what = "tensor '" + printable(t.name) + "'";
    if (t.offset % g.alignment_ != 0)
      return fail(what + ": offset " + u64s(t.offset) + " is not a multiple of the alignment " +
                  u64s(g.alignment_));
    auto begin = checked_add(g.data_offset_, t.offset);
    if (!begin || !range_fits(*begin, t.nbytes, size))
      return fail(what + ": data [offset " + u64s(t.offset) + ", " + u64s(t.nbytes) +
                  " bytes] extends past end of file (size " + u64s(size) + ")");
  }
  // Overlaps: sort by offset and compare neighbours.
  std::vector<size_t> order(infos.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return infos[a].offset < infos[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const Info& prev = infos[order[k - 1]];
    const Info& cur = infos[order[k]];
    if (cur.offset < prev.offset + prev.nbytes)  // in range: both checked against size above
      return fail("tensor '" + printable(cur.name) + "': data [offset " + u64s(cur.offset) + ", " +
                  u64s(cur.nbytes) + " bytes] overlaps tensor '" + printable(prev.name) +
                  "' [offset " + u64s(prev.offset) + ", " + u64s(prev.nbytes) + " bytes]");
  }

  g.tensors_.reserve(infos.size());
  for (Info& t : infos) {
    TensorView v;
    v.name = std::move(t.name);
    v.dtype = t.dtype;
    v.shape = std::move(t.shape);
    v.data = data + g.data_offset_ + t.offset;
    v.nbytes = t.nbytes;
    g.tensors_.push_back(std::move(v));
  }
  return g;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorView* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::string>();
  if (v->type != GgufType::STRING)
    return Status::error(name_ + ": " + type_mismatch(key, v->type, "STRING"));
  return std::optional<std::string>(v->s);
}

Result<std::optional<int64_t>> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<int64_t>();
  if (!is_integer_type(v->type))
    return Status::error(name_ + ": " + type_mismatch(key, v->type, "an integer"));
  if (v->type == GgufType::UINT64 && v->u > uint64_t(std::numeric_limits<int64_t>::max()))
    return Status::error(name_ + ": metadata key '" + std::string(key) + "': value " + u64s(v->u) +
                         " does not fit in int64");
  return std::optional<int64_t>(v->i);
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<double>();
  if (v->type == GgufType::FLOAT32 || v->type == GgufType::FLOAT64)
    return std::optional<double>(v->f);
  if (v->type == GgufType::UINT64) return std::optional<double>(double(v->u));
  if (is_integer_type(v->type)) return std::optional<double>(double(v->i));
  return Status::error(name_ + ": " + type_mismatch(key, v->type, "a number"));
}

Result<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<bool>();
  if (v->type != GgufType::BOOL)
    return Status::error(name_ + ": " + type_mismatch(key, v->type, "BOOL"));
  return std::optional<bool>(v->b);
}

Result<std::optional<std::vector<std::string>>> GgufFile::get_string_array(
    std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::vector<std::string>>();
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING)
    return Status::error(name_ + ": " + type_mismatch(key, v->type, "an array of STRING") +
                         (v->type == GgufType::ARRAY
                              ? std::string(" (elements are ") + gguf_type_name(v->elem_type) + ")"
                              : ""));
  return std::optional<std::vector<std::string>>(v->strings);
}

Result<std::optional<std::vector<double>>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::vector<double>>();
  if (v->type == GgufType::ARRAY &&
      (v->elem_type == GgufType::FLOAT32 || v->elem_type == GgufType::FLOAT64))
    return std::optional<std::vector<double>>(v->floats);
  if (v->type == GgufType::ARRAY && is_integer_type(v->elem_type)) {
    std::vector<double> out;
    out.reserve(v->ints.size());
    for (int64_t x : v->ints)
      out.push_back(v->elem_type == GgufType::UINT64 ? double(uint64_t(x)) : double(x));
    return std::optional<std::vector<double>>(std::move(out));
  }
  return Status::error(name_ + ": " + type_mismatch(key, v->type, "an array of numbers") +
                       (v->type == GgufType::ARRAY
                            ? std::string(" (elements are ") + gguf_type_name(v->elem_type) + ")"
                            : ""));
}

Result<std::optional<std::vector<int64_t>>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::vector<int64_t>>();
  if (v->type != GgufType::ARRAY ||
      !(is_integer_type(v->elem_type) || v->elem_type == GgufType::BOOL))
    return Status::error(name_ + ": " + type_mismatch(key, v->type, "an array of integers") +
                         (v->type == GgufType::ARRAY
                              ? std::string(" (elements are ") + gguf_type_name(v->elem_type) + ")"
                              : ""));
  if (v->elem_type == GgufType::UINT64)
    for (int64_t x : v->ints)
      if (x < 0)
        return Status::error(name_ + ": metadata key '" + std::string(key) + "': element " +
                             u64s(uint64_t(x)) + " does not fit in int64");
  return std::optional<std::vector<int64_t>>(v->ints);
}

}  // namespace hearth
