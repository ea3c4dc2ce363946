// GGUF v3 writer: metadata in insertion order, tensor infos, then the aligned data section.
// Bytes go through one emit() routine so write(), to_bytes() and open_stream()'s header agree.
#include <functional>
#include <set>

#include "base/checked-math.h"
#include "formats/gguf.h"

namespace hearth {

using Sink = std::function<bool(const void*, uint64_t)>;

// Serialises GGUF's little-endian fields to a sink, tracking the file position for padding.
class GgufEmitter {
 public:
  // `pos`: where in the file the sink continues (streams emit each tensor separately).
  explicit GgufEmitter(const Sink& sink, uint64_t pos = 0) : sink_(sink), pos_(pos) {}
  template <class T>
  void put(T v) {
    raw(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, uint64_t n) {
    if (ok_ && n) ok_ = sink_(p, n);
    pos_ += n;
  }
  void zeros(uint64_t n) {
    static const uint8_t zero[64] = {};
    while (n) {
      const uint64_t k = n < sizeof zero ? n : sizeof zero;
      raw(zero, k);
      n -= k;
    }
  }
  void pad_to(uint64_t alignment) { zeros((alignment - pos_ % alignment) % alignment); }

 private:
  const Sink& sink_;
  uint64_t pos_ = 0;
  bool ok_ = true;
};

namespace {

// Runs `body` with an emitter appending to `f`; the first write error, if any.
template <class Body>
Status emit_to(AtomicFile& f, Body body) {
  Status st = Status::ok();
  const Sink sink = [&](const void* p, uint64_t n) {
    st = f.write(p, n);
    return st.is_ok();
  };
  GgufEmitter e(sink, f.bytes_written());
  body(e);
  return st;
}

void emit_scalar_of(GgufEmitter& e, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::UINT8:
      e.put<uint8_t>(uint8_t(i));
      break;
    case GgufType::INT8:
      e.put<int8_t>(int8_t(i));
      break;
    case GgufType::UINT16:
      e.put<uint16_t>(uint16_t(i));
      break;
    case GgufType::INT16:
      e.put<int16_t>(int16_t(i));
      break;
    case GgufType::UINT32:
      e.put<uint32_t>(uint32_t(i));
      break;
    case GgufType::INT32:
      e.put<int32_t>(int32_t(i));
      break;
    case GgufType::UINT64:
      e.put<uint64_t>(uint64_t(i));
      break;
    case GgufType::INT64:
      e.put<int64_t>(i);
      break;
    case GgufType::BOOL:
      e.put<uint8_t>(i ? 1 : 0);
      break;
    case GgufType::FLOAT32:
      e.put<float>(float(f));
      break;
    case GgufType::FLOAT64:
      e.put<double>(f);
      break;
    default:
      break;
  }
}

// The payload of a value (without its type id, which the caller writes where GGUF wants it).
void emit_payload(GgufEmitter& e, const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING:
      e.str(v.s);
      return;
    case GgufType::ARRAY: {
      e.put<uint32_t>(uint32_t(v.elem_type));
      e.put<uint64_t>(v.array_size());
      switch (v.elem_type) {
        case GgufType::STRING:
          for (const auto& s : v.strings) e.str(s);
          break;
        case GgufType::ARRAY:
          for (const auto& item : v.items) emit_payload(e, item);
          break;
        case GgufType::FLOAT32:
        case GgufType::FLOAT64:
          for (double f : v.floats) emit_scalar_of(e, v.elem_type, 0, f);
          break;
        default:
          for (int64_t i : v.ints) emit_scalar_of(e, v.elem_type, i, 0);
          break;
      }
      return;
    }
    case GgufType::BOOL:
      e.put<uint8_t>(v.b ? 1 : 0);
      return;
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64:
      emit_scalar_of(e, v.type, int64_t(v.u), 0);
      return;
    default:
      emit_scalar_of(e, v.type, v.i, v.f);
      return;
  }
}

// The byte size of a tensor of this dtype and shape (outermost-first), or why there is none.
Result<uint64_t> tensor_nbytes(const std::string& name, DType dtype,
                               const std::vector<int64_t>& shape) {
  const std::string what = "gguf writer: tensor '" + name + "'";
  if (shape.empty() || shape.size() > 4)
    return Status::error(what + ": needs 1 to 4 dimensions, has " + std::to_string(shape.size()));
  uint64_t rows = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0)
      return Status::error(what + ": dimension " + std::to_string(d) + " is " +
                           std::to_string(shape[d]));
    if (d + 1 < shape.size()) {
      auto r = checked_mul(rows, uint64_t(shape[d]));
      if (!r) return Status::error(what + ": size overflows");
      rows = *r;
    }
  }
  const DTypeInfo* info_p = dtype_info(uint32_t(dtype));
  if (!info_p) return Status::error(what + ": unknown dtype id " + std::to_string(uint32_t(dtype)));
  const DTypeInfo& info = *info_p;
  const uint64_t ne0 = uint64_t(shape.back());
  if (ne0 % info.block_size != 0)
    return Status::error(what + ": row length " + std::to_string(ne0) +
                         " is not a multiple of the " + info.name + " block size");
  auto row = checked_mul(ne0 / info.block_size, info.block_bytes);
  auto total = row ? checked_mul(*row, rows) : std::nullopt;
  if (!total) return Status::error(what + ": size overflows");
  return *total;
}

GgufValue scalar(GgufType t) {
  GgufValue v;
  v.type = t;
  return v;
}

}  // namespace

void GgufWriter::set_scalar(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_)
    if (k == key) {  // replacing keeps the key's position, as a dict update would
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_u32(const std::string& key, uint32_t x) {
  GgufValue v = scalar(GgufType::UINT32);
  v.u = x;
  v.i = x;
  set_scalar(key, std::move(v));
}
void GgufWriter::set_i32(const std::string& key, int32_t x) {
  GgufValue v = scalar(GgufType::INT32);
  v.i = x;
  v.u = uint64_t(int64_t(x));
  set_scalar(key, std::move(v));
}
void GgufWriter::set_u64(const std::string& key, uint64_t x) {
  GgufValue v = scalar(GgufType::UINT64);
  v.u = x;
  v.i = int64_t(x);
  set_scalar(key, std::move(v));
}
void GgufWriter::set_f32(const std::string& key, float x) {
  GgufValue v = scalar(GgufType::FLOAT32);
  v.f = x;
  set_scalar(key, std::move(v));
}
void GgufWriter::set_bool(const std::string& key, bool x) {
  GgufValue v = scalar(GgufType::BOOL);
  v.b = x;
  v.i = v.u = x ? 1 : 0;
  set_scalar(key, std::move(v));
}
void GgufWriter::set_string(const std::string& key, const std::string& x) {
  GgufValue v = scalar(GgufType::STRING);
  v.s = x;
  set_scalar(key, std::move(v));
}
void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  set_scalar(key, v);
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& x) {
  GgufValue v = scalar(GgufType::ARRAY);
  v.elem_type = GgufType::STRING;
  v.strings = x;
  set_scalar(key, std::move(v));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& x) {
  GgufValue v = scalar(GgufType::ARRAY);
  v.elem_type = GgufType::FLOAT32;
  v.floats.assign(x.begin(), x.end());
  set_scalar(key, std::move(v));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& x) {
  GgufValue v = scalar(GgufType::ARRAY);
  v.elem_type = GgufType::INT32;
  v.ints.assign(x.begin(), x.end());
  set_scalar(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            std::vector<uint8_t> bytes) {
  tensors_.push_back(Tensor{name, dtype, shape, std::move(bytes)});
}

void GgufWriter::add_tensor_ref(const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape, const void* data,
                                uint64_t nbytes) {
  Tensor t{name, dtype, shape, {}};
  t.ref = static_cast<const uint8_t*>(data);
  t.ref_size = nbytes;
  tensors_.push_back(std::move(t));
}

void GgufWriter::declare_tensor(const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape) {
  Tensor t{name, dtype, shape, {}};
  t.declared = true;
  const Result<uint64_t> nbytes = tensor_nbytes(t.name, t.dtype, t.shape);
  t.ref_size = nbytes ? nbytes.value() : 0;  // a bad shape: validate() reports it
  tensors_.push_back(std::move(t));
}

uint64_t GgufWriter::alignment() const {
  for (const auto& [k, v] : kv_)
    if (k == "general.alignment" && v.type != GgufType::ARRAY && v.type != GgufType::STRING &&
        v.u > 0 && v.u <= (1u << 30) && (v.u & (v.u - 1)) == 0)
      return v.u;
  return 32;
}

Status GgufWriter::validate() const {
  std::set<std::string> keys, names;
  for (const auto& [k, v] : kv_) {
    if (k.empty()) return Status::error("gguf writer: empty metadata key");
    if (!keys.insert(k).second) return Status::error("gguf writer: duplicate key '" + k + "'");
    // Any integer type the reader accepts, so quantize can copy a source file's key as is.
    const bool integer =
        v.type <= GgufType::INT32 || v.type == GgufType::UINT64 || v.type == GgufType::INT64;
    if (k == "general.alignment" && (!integer || alignment() != v.u))
      return Status::error(
          "gguf writer: general.alignment must be an integer power of two between 1 and 2^30");
  }
  for (const Tensor& t : tensors_) {
    if (t.name.empty()) return Status::error("gguf writer: empty tensor name");
    if (!names.insert(t.name).second)
      return Status::error("gguf writer: tensor '" + t.name + "': duplicate name");
    HEARTH_ASSIGN_OR_RETURN(const uint64_t total, tensor_nbytes(t.name, t.dtype, t.shape));
    if (total != t.size())
      return Status::error("gguf writer: tensor '" + t.name + "': has " + std::to_string(t.size()) +
                           " bytes, shape needs " + std::to_string(total));
  }
  return Status::ok();
}

void GgufWriter::emit(GgufEmitter& e, bool with_data) const {
  const uint64_t align = alignment();
  e.put<uint32_t>(0x46554747);  // "GGUF"
  e.put<uint32_t>(3);
  e.put<uint64_t>(tensors_.size());
  e.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    e.str(k);
    e.put<uint32_t>(uint32_t(v.type));
    emit_payload(e, v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    e.str(t.name);
    e.put<uint32_t>(uint32_t(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) e.put<uint64_t>(uint64_t(t.shape[d]));
    e.put<uint32_t>(uint32_t(t.dtype));
    e.put<uint64_t>(offset);
    offset += (t.size() + align - 1) / align * align;
  }
  e.pad_to(align);
  if (!with_data) return;
  for (const Tensor& t : tensors_) {
    if (t.declared)
      e.zeros(t.size());
    else
      e.raw(t.data(), t.size());
    e.pad_to(align);
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  const Sink sink = [&](const void* p, uint64_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return true;
  };
  GgufEmitter e(sink);
  emit(e, true);
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  HEARTH_TRY(validate().with_context(path));
  for (const Tensor& t : tensors_)
    if (t.declared)
      return Status::error(path + ": tensor '" + t.name +
                           "' was declared for streaming; write it through open_stream()");
  HEARTH_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  HEARTH_TRY(emit_to(f, [&](GgufEmitter& e) { emit(e, true); }));
  return f.commit();
}

Result<GgufTensorStream> GgufWriter::open_stream(const std::string& path) const {
  HEARTH_TRY(validate().with_context(path));
  std::vector<GgufTensorInfo> infos;
  for (const Tensor& t : tensors_) {
    if (!t.declared)
      return Status::error(path + ": tensor '" + t.name +
                           "' holds its bytes; a stream takes declared tensors only");
    infos.push_back({t.name, t.dtype, t.shape, t.size()});
  }
  HEARTH_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  HEARTH_TRY(emit_to(f, [&](GgufEmitter& e) { emit(e, false); }));
  return GgufTensorStream(std::move(f), std::move(infos), alignment());
}

Status GgufTensorStream::write_tensor(const void* data, uint64_t nbytes) {
  const std::string& path = file_.path();
  if (next_ >= tensors_.size())
    return Status::error(path + ": all " + std::to_string(tensors_.size()) +
                         " tensors are already written");
  const GgufTensorInfo& t = tensors_[next_];
  if (nbytes != t.nbytes)
    return Status::error(path + ": tensor '" + t.name + "': " + std::to_string(nbytes) +
                         " bytes, expected " + std::to_string(t.nbytes));
  HEARTH_TRY(emit_to(file_, [&](GgufEmitter& e) {
    e.raw(data, nbytes);
    e.pad_to(alignment_);
  }));
  ++next_;
  return Status::ok();
}

Status GgufTensorStream::finish() {
  if (next_ != tensors_.size())
    return Status::error(file_.path() + ": only " + std::to_string(next_) + " of " +
                         std::to_string(tensors_.size()) + " tensors written");
  return file_.commit();
}

}  // namespace hearth
