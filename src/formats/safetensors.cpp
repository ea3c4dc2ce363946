// Safetensors: header (u64 length + JSON) parsing with every offset checked, sharded checkpoints
// via model.safetensors.index.json, and the writer. New dtypes: one row in kDTypes.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "base/atomic-file.h"
#include "base/checked-math.h"
#include "base/log.h"
#include "formats/safetensors.h"

namespace hearth {

namespace {

using json = nlohmann::json;

// The safetensors project caps headers at 100 MB; a bigger length field is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct StDType {
  const char* name;
  DType dtype;
};
// Safetensors dtype names Hearth can hold in a TensorView. U8/BOOL/F8 have no DType yet.
constexpr StDType kDTypes[] = {
    {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
    {"I64", DType::I64}, {"I32", DType::I32}, {"I16", DType::I16},   {"I8", DType::I8},
};

std::string u64s(uint64_t v) {
  return std::to_string(v);
}

// One line, bounded length: JSON error text and names from files go into error messages.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

const char* st_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return nullptr;
}

// Parses a header JSON object, refusing duplicate top-level keys (nlohmann would keep the last).
Result<json> parse_header_json(const char* begin, const char* end) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string())
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    return Status::error("header: malformed JSON: " + one_line(e.what()));
  }
  if (!duplicate.empty())
    return Status::error("header: duplicate tensor '" + one_line(duplicate) + "'");
  if (!j.is_object()) return Status::error("header: JSON is not an object");
  return j;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto file = std::make_shared<MappedFile>(std::move(mapped));
  HEARTH_ASSIGN_OR_RETURN(SafetensorsFile st, parse(file->data(), file->size(), path));
  st.file_ = std::move(file);  // the views point into this mapping
  return st;
}

Result<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, uint64_t size,
                                               const std::string& name) {
  auto fail = [&](const std::string& msg) -> Result<SafetensorsFile> {
    return Status::error(name + ": " + msg);
  };
  if (size < 8)
    return fail("header length: file is " + u64s(size) + " bytes, too short for safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);  // little-endian on every platform Hearth builds for
  if (header_len > size - 8)
    return fail("header length " + u64s(header_len) + " extends past end of file (size " +
                u64s(size) + ")");
  if (header_len > kMaxHeaderBytes)
    return fail("header length " + u64s(header_len) + " exceeds the 100 MB limit");
  if (header_len < 2) return fail("header length " + u64s(header_len) + " is too short for JSON");

  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  auto parsed = parse_header_json(hbegin, hbegin + header_len);
  if (!parsed) return parsed.status().with_context(name);
  const json& header = parsed.value();

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  SafetensorsFile st;
  st.name_ = name;

  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) return fail("__metadata__: expected an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return fail("__metadata__: value of '" + one_line(m.key()) + "' is not a string");
        st.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + one_line(key) + "'";
    if (key.empty()) return fail("tensor with an empty name");
    if (!v.is_object()) return fail(what + ": expected an object");
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return fail(what + ": dtype: missing or not a string");
    const std::string dname = dt->get<std::string>();
    const StDType* found = nullptr;
    for (const auto& d : kDTypes)
      if (dname == d.name) found = &d;
    if (!found) return fail(what + ": dtype: unsupported dtype '" + one_line(dname) + "'");

    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return fail(what + ": shape: missing or not an array");
    if (sh->size() > 8) return fail(what + ": shape: " + u64s(sh->size()) + " dimensions");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const json& d : *sh) {
      // Zero-length dims are legal in safetensors (empty tensors); negatives are not.
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        return fail(what + ": shape: dimension " + one_line(d.dump()) +
                    " is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      auto n = checked_mul(numel, dim);
      if (!n || *n > uint64_t(INT64_MAX))
        return fail(what + ": shape: element count overflows 64 bits");
      numel = *n;
      shape.push_back(int64_t(dim));
    }

    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      return fail(what + ": data_offsets: expected [begin, end] as non-negative integers");
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (end < begin)
      return fail(what + ": data_offsets [" + u64s(begin) + ", " + u64s(end) +
                  "]: end before begin");
    if (end > data_size)
      return fail(what + ": data_offsets [" + u64s(begin) + ", " + u64s(end) +
                  "] extend past end of data (" + u64s(data_size) + " bytes)");
    const uint64_t elem = dtype_info(found->dtype).block_bytes;
    auto want = checked_mul(numel, elem);
    if (!want || *want != end - begin)
      return fail(what + ": data_offsets [" + u64s(begin) + ", " + u64s(end) + "] hold " +
                  u64s(end - begin) + " bytes, but " + found->name + " " + shape_string(shape) +
                  " needs " + (want ? u64s(*want) : std::string("more than 2^64")));
    TensorView t;
    t.name = key;
    t.dtype = found->dtype;
    t.shape = std::move(shape);
    t.data = data + data_start + begin;
    t.nbytes = end - begin;
    spans.push_back({begin, end, st.tensors_.size()});
    st.tensors_.push_back(std::move(t));
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t k = 1; k < spans.size(); ++k) {
    const Span& p = spans[k - 1];
    const Span& c = spans[k];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (c.begin < p.end && c.end > c.begin)
      return fail("tensor '" + one_line(st.tensors_[c.index].name) + "': data_offsets [" +
                  u64s(c.begin) + ", " + u64s(c.end) + "] overlap tensor '" +
                  one_line(st.tensors_[p.index].name) + "' [" + u64s(p.begin) + ", " + u64s(p.end) +
                  "]");
  }
  // Keep file order stable for callers that list tensors: sort by data offset.
  std::vector<TensorView> ordered;
  ordered.reserve(spans.size());
  for (const Span& s : spans) ordered.push_back(std::move(st.tensors_[s.index]));
  st.tensors_ = std::move(ordered);
  for (size_t i = 0; i < st.tensors_.size(); ++i) st.index_.emplace(st.tensors_[i].name, i);
  return st;
}

const TensorView* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_dir(const std::string& dir) {
  SafetensorsCheckpoint ck;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (!file_exists(index_path)) {
    if (!file_exists(single_path))
      return Status::error(dir + ": no model.safetensors or model.safetensors.index.json");
    HEARTH_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single_path));
    ck.files_.push_back(std::make_shared<SafetensorsFile>(std::move(f)));
    for (const TensorView& t : ck.files_[0]->tensors()) ck.index_.emplace(t.name, &t);
    return ck;
  }

  HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
  auto fail = [&](const std::string& msg) -> Result<SafetensorsCheckpoint> {
    return Status::error(index_path + ": " + msg);
  };
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return fail("malformed JSON: " + one_line(e.what()));
  }
  if (!j.is_object()) return fail("expected a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return fail("weight_map: missing or not an object");
  if (wm->empty()) return fail("weight_map: empty");

  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string what = "weight_map: tensor '" + one_line(it.key()) + "'";
    if (!it.value().is_string()) return fail(what + ": shard name is not a string");
    const std::string shard = it.value().get<std::string>();
    // Shard names are plain file names beside the index; anything else could escape the folder.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      return fail(what + ": shard '" + one_line(shard) + "' is not a file name in the folder");
    if (!shards.count(shard)) {
      const std::string shard_path = dir + "/" + shard;
      if (!file_exists(shard_path))
        return fail(what + ": shard '" + shard + "' not found (" + shard_path + ")");
      HEARTH_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(shard_path));
      shards[shard] = std::make_shared<SafetensorsFile>(std::move(f));
      ck.files_.push_back(shards[shard]);
    }
    const TensorView* t = shards[shard]->find_tensor(it.key());
    if (!t) return fail(what + ": not found in shard '" + shard + "'");
    ck.index_.emplace(it.key(), t);
  }
  return ck;
}

const TensorView* SafetensorsCheckpoint::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

Status SafetensorsCheckpoint::keep_language_model(const std::string& wrapper,
                                                  const std::string& dir) {
  static const std::pair<std::string_view, std::string_view> kPrefixes[] = {
      {"language_model.model.", "model."},
      {"model.language_model.", "model."},
      {"language_model.lm_head.", "lm_head."}};
  std::map<std::string, const TensorView*, std::less<>> kept;
  for (const auto& [name, t] : index_) {
    if (name.starts_with("lm_head.")) {  // (transformers 5 keeps the head's own name)
      kept.emplace(name, t);
      continue;
    }
    for (const auto& [from, to] : kPrefixes) {
      if (!name.starts_with(from)) continue;
      auto view = std::make_unique<TensorView>(*t);
      view->name = std::string(to) + name.substr(from.size());
      kept.emplace(view->name, view.get());
      renamed_.push_back(std::move(view));
      break;
    }
  }
  if (kept.empty())
    return Status::error(dir + ": a " + wrapper +
                         " checkpoint with no language-model tensors (language_model.*)");
  log_info(dir + ": a vision-language checkpoint (" + wrapper + "): its language model runs, " +
           "text only (" + std::to_string(kept.size()) + " of " + std::to_string(index_.size()) +
           " tensors)");
  index_ = std::move(kept);
  return Status::ok();
}

std::vector<const TensorView*> SafetensorsCheckpoint::tensors() const {
  std::vector<const TensorView*> out;
  out.reserve(index_.size());
  for (const auto& [name, t] : index_) out.push_back(t);
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<OwnedTensor>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const OwnedTensor& t : tensors) {
    const std::string what = path + ": tensor '" + t.name + "'";
    const char* dname = st_dtype_name(t.dtype);
    if (!dname)
      return Status::error(what + ": dtype " + dtype_name(t.dtype) +
                           " cannot be stored in safetensors");
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      return Status::error(what + ": empty, reserved or duplicate name");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      auto n = d < 0 ? std::nullopt : checked_mul(numel, uint64_t(d));
      if (!n) return Status::error(what + ": bad shape " + shape_string(t.shape));
      numel = *n;
    }
    auto want = checked_mul(numel, dtype_info(t.dtype).block_bytes);
    if (!want || *want != t.bytes.size())
      return Status::error(what + ": has " + u64s(t.bytes.size()) + " bytes, shape " +
                           shape_string(t.shape) + " needs " +
                           (want ? u64s(*want) : std::string("overflow")));
    header[t.name] = {
        {"dtype", dname}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  HEARTH_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  const uint64_t len = text.size();
  HEARTH_TRY(f.write(&len, 8));
  HEARTH_TRY(f.write(text.data(), len));
  for (const OwnedTensor& t : tensors) HEARTH_TRY(f.write(t.bytes.data(), t.bytes.size()));
  return f.commit();
}

}  // namespace hearth
