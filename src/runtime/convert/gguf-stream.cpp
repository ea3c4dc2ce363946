// GgufStream: header serialisation (keys, typed values, tensor infos) and sequential data writes.
// Value encoding follows the GGUF v3 spec; a new value kind needs a case in emit_value.
#include "runtime/convert/gguf-stream.h"

#include <cerrno>
#include <cstring>
#include <set>

#include "base/checked-math.h"

namespace hearth::convert {

namespace {

GgufValue scalar(GgufType t) {
  GgufValue v;
  v.type = t;
  return v;
}

GgufValue array(GgufType elem) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.elem_type = elem;
  return v;
}

// Serialises values into a byte buffer (the header is small next to the data).
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

void emit_number(Bytes& o, GgufType t, int64_t i, uint64_t u, double f) {
  switch (t) {
    case GgufType::UINT8:
      o.put<uint8_t>(uint8_t(u));
      break;
    case GgufType::INT8:
      o.put<int8_t>(int8_t(i));
      break;
    case GgufType::UINT16:
      o.put<uint16_t>(uint16_t(u));
      break;
    case GgufType::INT16:
      o.put<int16_t>(int16_t(i));
      break;
    case GgufType::UINT32:
      o.put<uint32_t>(uint32_t(u));
      break;
    case GgufType::INT32:
      o.put<int32_t>(int32_t(i));
      break;
    case GgufType::UINT64:
      o.put<uint64_t>(u);
      break;
    case GgufType::INT64:
      o.put<int64_t>(i);
      break;
    case GgufType::BOOL:
      o.put<uint8_t>(i ? 1 : 0);
      break;
    case GgufType::FLOAT32:
      o.put<float>(float(f));
      break;
    case GgufType::FLOAT64:
      o.put<double>(f);
      break;
    default:
      break;
  }
}

// The payload of a value (its type id is written by the caller where GGUF wants it).
void emit_value(Bytes& o, const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING:
      o.str(v.s);
      return;
    case GgufType::BOOL:
      o.put<uint8_t>(v.b ? 1 : 0);
      return;
    case GgufType::ARRAY:
      o.put<uint32_t>(uint32_t(v.elem_type));
      o.put<uint64_t>(v.array_size());
      if (v.elem_type == GgufType::STRING) {
        for (const auto& s : v.strings) o.str(s);
      } else if (v.elem_type == GgufType::ARRAY) {
        for (const auto& item : v.items) emit_value(o, item);
      } else if (v.elem_type == GgufType::FLOAT32 || v.elem_type == GgufType::FLOAT64) {
        for (double f : v.floats) emit_number(o, v.elem_type, 0, 0, f);
      } else {
        for (int64_t i : v.ints) emit_number(o, v.elem_type, i, uint64_t(i), 0);
      }
      return;
    default:
      emit_number(o, v.type, v.i, v.u, v.f);
      return;
  }
}

}  // namespace

void put(Metadata& m, const std::string& key, GgufValue v) {
  for (auto& [k, old] : m)
    if (k == key) {
      old = std::move(v);
      return;
    }
  m.emplace_back(key, std::move(v));
}

GgufValue value_u32(uint32_t x) {
  GgufValue v = scalar(GgufType::UINT32);
  v.u = x;
  v.i = x;
  return v;
}
GgufValue value_i32(int32_t x) {
  GgufValue v = scalar(GgufType::INT32);
  v.i = x;
  v.u = uint64_t(int64_t(x));
  return v;
}
GgufValue value_f32(float x) {
  GgufValue v = scalar(GgufType::FLOAT32);
  v.f = x;
  return v;
}
GgufValue value_bool(bool x) {
  GgufValue v = scalar(GgufType::BOOL);
  v.b = x;
  v.i = v.u = x ? 1 : 0;
  return v;
}
GgufValue value_string(const std::string& x) {
  GgufValue v = scalar(GgufType::STRING);
  v.s = x;
  return v;
}
GgufValue value_strings(const std::vector<std::string>& x) {
  GgufValue v = array(GgufType::STRING);
  v.strings = x;
  return v;
}
GgufValue value_f32s(const std::vector<float>& x) {
  GgufValue v = array(GgufType::FLOAT32);
  v.floats.assign(x.begin(), x.end());
  return v;
}
GgufValue value_i32s(const std::vector<int32_t>& x) {
  GgufValue v = array(GgufType::INT32);
  v.ints.assign(x.begin(), x.end());
  return v;
}

GgufStream::GgufStream(GgufStream&& o) noexcept
    : path_(std::move(o.path_)),
      tmp_(std::move(o.tmp_)),
      f_(o.f_),
      tensors_(std::move(o.tensors_)),
      alignment_(o.alignment_),
      pos_(o.pos_),
      next_(o.next_) {
  o.f_ = nullptr;
}

GgufStream::~GgufStream() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

Result<GgufStream> GgufStream::open(const std::string& path, const Metadata& metadata,
                                    std::vector<TensorInfo> tensors) {
  GgufStream s;
  s.path_ = path;
  s.tmp_ = path + ".tmp";
  std::set<std::string> keys;
  for (const auto& [k, v] : metadata) {
    if (!keys.insert(k).second) return Status::error(path + ": duplicate metadata key " + k);
    if (k == "general.alignment") {
      const uint64_t a = v.type == GgufType::UINT32 || v.type == GgufType::UINT64 ? v.u : 0;
      if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
        return Status::error(path + ": general.alignment: invalid value");
      s.alignment_ = a;
    }
  }
  std::set<std::string> names;
  Bytes h;
  h.b.reserve(size_t(1) << 16);  // also keeps GCC 12's -Wstringop-overflow false positive away
  h.put<uint32_t>(0x46554747u);  // "GGUF" little-endian
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(metadata.size());
  for (const auto& [k, v] : metadata) {
    h.str(k);
    h.put<uint32_t>(uint32_t(v.type));
    emit_value(h, v);
  }
  uint64_t offset = 0;
  for (auto& t : tensors) {
    if (!names.insert(t.name).second) return Status::error(path + ": duplicate tensor " + t.name);
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      const auto m = d > 0 ? checked_mul(n, uint64_t(d)) : std::nullopt;
      if (!m)
        return Status::error(path + ": tensor " + t.name + ": bad shape " + shape_string(t.shape));
      n = *m;
    }
    if (t.shape.empty()) return Status::error(path + ": tensor " + t.name + ": no dimensions");
    const auto rb = row_bytes(t.dtype, uint64_t(t.shape.back()));
    const auto total = rb ? checked_mul(*rb, n / uint64_t(t.shape.back())) : std::nullopt;
    if (total) t.nbytes = *total;
    if (!total)
      return Status::error(path + ": tensor " + t.name + ": row length " +
                           std::to_string(t.shape.back()) + " does not fit " + dtype_name(t.dtype) +
                           " blocks");
    h.str(t.name);
    h.put<uint32_t>(uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) h.put<uint64_t>(uint64_t(*it));
    h.put<uint32_t>(uint32_t(t.dtype));
    h.put<uint64_t>(offset);
    offset += (t.nbytes + s.alignment_ - 1) / s.alignment_ * s.alignment_;
  }
  s.tensors_ = std::move(tensors);
  s.f_ = std::fopen(s.tmp_.c_str(), "wb");
  if (!s.f_) return Status::error(s.tmp_ + ": cannot create: " + std::strerror(errno));
  HEARTH_TRY(s.write_raw(h.b.data(), h.b.size()));
  HEARTH_TRY(s.pad());
  return s;
}

Status GgufStream::write_raw(const void* p, uint64_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n)
    return Status::error(tmp_ + ": write failed: " + std::strerror(errno));
  pos_ += n;
  return Status::ok();
}

Status GgufStream::pad() {
  static const uint8_t zeros[64] = {};
  uint64_t left = (alignment_ - pos_ % alignment_) % alignment_;
  while (left) {
    const uint64_t n = left < sizeof zeros ? left : sizeof zeros;
    HEARTH_TRY(write_raw(zeros, n));
    left -= n;
  }
  return Status::ok();
}

Status GgufStream::write_tensor(size_t index, const void* data, uint64_t nbytes) {
  if (!f_) return Status::error(path_ + ": stream is closed");
  if (index != next_ || index >= tensors_.size())
    return Status::error(path_ + ": tensor " + std::to_string(index) + " written out of order");
  if (nbytes != tensors_[index].nbytes)
    return Status::error(path_ + ": tensor " + tensors_[index].name + ": " +
                         std::to_string(nbytes) + " bytes, expected " +
                         std::to_string(tensors_[index].nbytes));
  HEARTH_TRY(write_raw(data, nbytes));
  HEARTH_TRY(pad());
  ++next_;
  return Status::ok();
}

Status GgufStream::finish() {
  if (!f_) return Status::error(path_ + ": stream is closed");
  if (next_ != tensors_.size())
    return Status::error(path_ + ": only " + std::to_string(next_) + " of " +
                         std::to_string(tensors_.size()) + " tensors written");
  const bool flushed = std::fflush(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!flushed || !closed) {
    std::remove(tmp_.c_str());
    return Status::error(tmp_ + ": write failed: " + std::strerror(errno));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    return Status::error(path_ + ": cannot rename into place: " + why);
  }
  return Status::ok();
}

}  // namespace hearth::convert
