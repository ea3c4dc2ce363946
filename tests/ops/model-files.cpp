// Minimal GGUF / safetensors readers for tests (bounds-checked; a bad file is a test failure).
// Extend by adding the metadata value kinds a new golden file needs to skip.
#include "model-files.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/half.h"

namespace hearth::test {

namespace {

std::string slurp(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open " + path;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Cursor {
  const std::string& s;
  uint64_t pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (pos + sizeof(T) > s.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, s.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str() {
    const uint64_t len = get<uint64_t>();
    if (!ok || len > s.size() - pos) {
      ok = false;
      return {};
    }
    std::string out = s.substr(pos, len);
    pos += len;
    return out;
  }
};

uint64_t scalar_size(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 7:
      return 1;
    case 2:
    case 3:
      return 2;
    case 4:
    case 5:
    case 6:
      return 4;
    case 10:
    case 11:
    case 12:
      return 8;
    default:
      return 0;
  }
}

// Skips one metadata value of `type`; returns the value when it is an integer (for alignment).
uint64_t skip_value(Cursor& c, uint32_t type) {
  if (type == 8) {
    c.str();
    return 0;
  }
  if (type == 9) {
    const uint32_t elem = c.get<uint32_t>();
    const uint64_t count = c.get<uint64_t>();
    for (uint64_t i = 0; i < count && c.ok; ++i) skip_value(c, elem);
    return 0;
  }
  const uint64_t size = scalar_size(type);
  if (size == 0) {
    c.ok = false;
    return 0;
  }
  uint64_t v = 0;
  if (c.pos + size > c.s.size()) {
    c.ok = false;
    return 0;
  }
  std::memcpy(&v, c.s.data() + c.pos, size);
  c.pos += size;
  return v;
}

// Bytes of a GGUF tensor from its type's block layout (the types the goldens use).
uint64_t tensor_bytes(uint32_t type, uint64_t numel) {
  struct Row {
    uint32_t id, block, bytes;
  };
  static const Row rows[] = {{0, 1, 4},      {1, 1, 2},      {30, 1, 2},     {2, 32, 18},
                             {3, 32, 20},    {6, 32, 22},    {7, 32, 24},    {8, 32, 34},
                             {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {10, 256, 84},
                             {11, 256, 110}};
  for (const Row& r : rows)
    if (r.id == type) return numel / r.block * r.bytes;
  return 0;
}

}  // namespace

RawTensorFile read_gguf_tensors(const std::string& path, std::string* error) {
  RawTensorFile f;
  f.bytes = slurp(path, error);
  if (f.bytes.empty()) return f;
  Cursor c{f.bytes};
  if (c.get<uint32_t>() != 0x46554747u) {
    *error = path + ": not a GGUF file";
    return f;
  }
  c.get<uint32_t>();  // version
  const uint64_t n_tensors = c.get<uint64_t>();
  const uint64_t n_kv = c.get<uint64_t>();
  uint64_t alignment = 32;
  for (uint64_t i = 0; i < n_kv && c.ok; ++i) {
    const std::string key = c.str();
    const uint32_t type = c.get<uint32_t>();
    const uint64_t v = skip_value(c, type);
    if (key == "general.alignment") alignment = v;
  }
  struct Info {
    std::string name;
    RawTensor t;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors && c.ok; ++i) {
    Info info;
    info.name = c.str();
    const uint32_t n_dims = c.get<uint32_t>();
    if (n_dims > 4) c.ok = false;
    for (uint32_t d = 0; d < n_dims && c.ok; ++d)
      info.t.shape.insert(info.t.shape.begin(), int64_t(c.get<uint64_t>()));
    info.t.type = c.get<uint32_t>();
    info.offset = c.get<uint64_t>();
    infos.push_back(info);
  }
  if (!c.ok || alignment == 0) {
    *error = path + ": truncated or malformed GGUF header";
    return f;
  }
  const uint64_t data_start = (c.pos + alignment - 1) / alignment * alignment;
  for (Info& info : infos) {
    uint64_t numel = 1;
    for (int64_t d : info.t.shape) numel *= uint64_t(d);
    info.t.nbytes = tensor_bytes(info.t.type, numel);
    if (info.t.nbytes == 0 || data_start + info.offset + info.t.nbytes > f.bytes.size()) {
      *error = path + ": tensor " + info.name + " out of bounds or of unknown type";
      f.tensors.clear();
      return f;
    }
    info.t.data = reinterpret_cast<const uint8_t*>(f.bytes.data()) + data_start + info.offset;
    f.tensors[info.name] = info.t;
  }
  return f;
}

RawTensorFile read_safetensors(const std::string& path, std::string* error) {
  RawTensorFile f;
  f.bytes = slurp(path, error);
  if (f.bytes.size() < 8) {
    if (error->empty()) *error = path + ": too short";
    return f;
  }
  uint64_t header_len;
  std::memcpy(&header_len, f.bytes.data(), 8);
  if (header_len > f.bytes.size() - 8) {
    *error = path + ": header length out of bounds";
    return f;
  }
  const std::string h = f.bytes.substr(8, header_len);
  const uint64_t base = 8 + header_len;
  // Entries look like "name":{"dtype":"BF16","shape":[a,b],"data_offsets":[s,e]}.
  size_t pos = 0;
  while ((pos = h.find("\"dtype\"", pos)) != std::string::npos) {
    const size_t brace = h.rfind('{', pos);
    const size_t name_end = h.rfind('"', brace);
    const size_t name_begin = h.rfind('"', name_end - 1);
    const std::string name = h.substr(name_begin + 1, name_end - name_begin - 1);
    const size_t dt0 = h.find('"', h.find(':', pos) + 1);
    const std::string dtype = h.substr(dt0 + 1, h.find('"', dt0 + 1) - dt0 - 1);
    RawTensor t;
    t.type = dtype == "F32" ? 0 : dtype == "F16" ? 1 : dtype == "BF16" ? 30 : 99;
    const size_t sh = h.find('[', h.find("\"shape\"", pos));
    std::istringstream shape(h.substr(sh + 1, h.find(']', sh) - sh - 1));
    for (std::string item; std::getline(shape, item, ',');) t.shape.push_back(std::stoll(item));
    const size_t off = h.find('[', h.find("\"data_offsets\"", pos));
    std::istringstream offs(h.substr(off + 1, h.find(']', off) - off - 1));
    std::string a, b;
    std::getline(offs, a, ',');
    std::getline(offs, b, ',');
    const uint64_t begin = std::stoull(a), end = std::stoull(b);
    if (end < begin || base + end > f.bytes.size()) {
      *error = path + ": tensor " + name + " out of bounds";
      f.tensors.clear();
      return f;
    }
    t.data = reinterpret_cast<const uint8_t*>(f.bytes.data()) + base + begin;
    t.nbytes = end - begin;
    f.tensors[name] = t;
    pos = off;
  }
  return f;
}

std::vector<float> float_row(const RawTensor& t, int64_t r) {
  const int64_t n = t.shape.back();
  std::vector<float> out(size_t(n), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = uint64_t(r * n + i);
    if (t.type == 0) {
      std::memcpy(&out[size_t(i)], t.data + idx * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + idx * 2, 2);
      out[size_t(i)] = t.type == 1 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

}  // namespace hearth::test
