// libFuzzer entry point for loading a model. The bases are real: GGUFs (the shipped golden files
// and the golden checkpoints of every other family converted at start-up, each cut to a
// 512-token vocabulary, one given a byte-level BPE vocabulary, so an input loads in
// milliseconds) and the golden checkpoints as Hugging Face directories. The input's first byte
// picks a base (below 0x80 a GGUF, else a directory); the rest is an edit script over the
// GGUF's metadata and tensor table (values that lie about counts and sizes, keys of other
// families, arrays cut short, tensors reshaped, retyped, dropped) or the directory's
// config.json (fields of other families, values of other types). The result is loaded as
// `hearth run` loads a model, and a model that loads is tokenized, prefilled and stepped once on
// the CPU.
// The contract: a file the engine cannot honour is a load error of one line; a file it loads
// runs; nothing crashes, reads out of bounds or asks the allocator for more than the fuzzer's
// limit (-malloc_limit_mb).
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "runtime/convert/convert.h"
#include "runtime/engine.h"
#include "runtime/session.h"

using namespace hearth;

namespace {

constexpr int64_t kVocab = 512;  // tokens a base keeps

struct Base {
  std::string name;
  std::shared_ptr<const GgufFile> file;  // mapped: the tensors point into it (a copy shares it)
  std::vector<std::pair<std::string, GgufValue>> kv;
  std::vector<TensorView> tensors;
};

// An input's file and directory, removed at exit. (Namespace scope: destroyed after the exit
// handler that reads them, unlike setup()'s static.)
std::string g_input_path, g_input_dir;

std::string shared_dir() {
  const char* env = std::getenv("HEARTH_SHARED");
  return env && *env ? env : HEARTH_SHARED_DEFAULT_DIR;
}

[[noreturn]] void setup_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz_model: %s\n", what.c_str());
  std::abort();  // a target that loads nothing must not pass
}

// The file at `path` as a base: its metadata and tensor views (into the mapping it keeps, which
// outlives the file's removal).
Base open_base(const std::string& name, const std::string& path) {
  auto g = GgufFile::open(path);
  if (!g.is_ok()) setup_failed(g.message());
  Base b{name, std::make_shared<const GgufFile>(std::move(*g)), {}, {}};
  b.kv = b.file->metadata();
  b.tensors = b.file->tensors();
  return b;
}

GgufValue* find_kv(Base& b, const std::string& key) {
  for (auto& [k, v] : b.kv)
    if (k == key) return &v;
  return nullptr;
}

// Keeps the first kVocab tokens: the tokenizer arrays cut, ids past them moved to 0, merges
// kept only where both halves and their join survive, and the embedding / output rows cut.
void cut_vocab(Base& b) {
  GgufValue* tokens = find_kv(b, "tokenizer.ggml.tokens");
  if (!tokens) setup_failed(b.name + ": no tokenizer.ggml.tokens");
  const int64_t old_n = int64_t(tokens->strings.size());
  if (old_n <= kVocab) return;
  tokens->strings.resize(size_t(kVocab));
  const std::set<std::string> kept(tokens->strings.begin(), tokens->strings.end());
  for (auto& [key, v] : b.kv) {
    if (key == "tokenizer.ggml.scores") v.floats.resize(size_t(kVocab));
    if (key == "tokenizer.ggml.token_type") v.ints.resize(size_t(kVocab));
    if (key.size() > 9 && key.compare(key.size() - 9, 9, ".vocab_size") == 0) v.u = v.i = kVocab;
    if (key.rfind("tokenizer.ggml.", 0) == 0 && key.size() > 9 &&
        key.compare(key.size() - 9, 9, "_token_id") == 0 && (v.i >= kVocab || v.u >= kVocab))
      v.i = 0, v.u = 0;
    if (key == "tokenizer.ggml.merges") {
      std::vector<std::string> merges;
      for (const std::string& m : v.strings) {
        const size_t sp = m.find(' ');
        if (sp == std::string::npos) continue;
        const std::string l = m.substr(0, sp), r = m.substr(sp + 1);
        if (kept.count(l) && kept.count(r) && kept.count(l + r)) merges.push_back(m);
      }
      v.strings = std::move(merges);
    }
  }
  for (TensorView& t : b.tensors)
    if (!t.shape.empty() && t.shape[0] == old_n) {
      t.nbytes = t.nbytes / uint64_t(old_n) * uint64_t(kVocab);
      t.shape[0] = kVocab;
    }
}

// A base whose tokenizer.ggml.* come from another file (a vocab-only GGUF).
Base with_tokenizer_of(Base b, const Base& vocab, const std::string& name) {
  b.name = name;
  std::vector<std::pair<std::string, GgufValue>> kv;
  for (auto& e : b.kv)
    if (e.first.rfind("tokenizer.", 0) != 0) kv.push_back(std::move(e));
  for (const auto& e : vocab.kv)
    if (e.first.rfind("tokenizer.", 0) == 0) kv.push_back(e);
  b.kv = std::move(kv);
  return b;
}

// A Hugging Face directory: its config.json; its other files are linked into the input's dir.
struct HfBase {
  std::string name, dir;
  nlohmann::json config;
};

struct Setup {
  std::vector<Base> bases;
  std::vector<std::string> keys;  // every base's keys, the architecture prefix cut ("" + ".x")
  std::string path;               // where an input's file is written
  std::vector<HfBase> hf;
  std::vector<std::string> hf_keys;  // every config.json's fields ("rope_scaling.factor" nested)
  std::string hf_dir;                // where an input's directory is made
};

const char* const kHfDirs[] = {"llama2-tiny",  "qwen3-tiny",   "gemma2-tiny",    "phi3-tiny",
                               "mixtral-tiny", "gpt-oss-tiny", "qwen2-yarn-tiny"};

std::string arch_of(const Base& b) {
  for (const auto& [k, v] : b.kv)
    if (k == "general.architecture") return v.s;
  return "";
}

const Setup& setup() {
  static const Setup s = [] {
    Setup out;
    const std::string shared = shared_dir(), g = shared + "/goldens/";
    char tmpl[] = "/tmp/hearth-fuzz-model-XXXXXX";
    if (!mkdtemp(tmpl)) setup_failed("mkdtemp failed");
    const std::string tmp = tmpl;
    out.bases.push_back(open_base("llama2-tiny-q8_0", g + "llama2-tiny/llama2-tiny-q8_0.gguf"));
    out.bases.push_back(open_base("kjv-13m-q4_k_m", g + "kjv-13m/kjv-13m-q4_k_m.gguf"));
    out.bases.push_back(open_base("llama3-tiny-q4_0", g + "llama3-tiny/llama3-tiny-q4_0.gguf"));
    // Every other family from its golden checkpoint (the converter's own output).
    for (const char* dir : {"qwen3-tiny", "gemma2-tiny", "phi3-tiny", "mixtral-tiny",
                            "gpt-oss-tiny", "qwen2-yarn-tiny"}) {
      const std::string file = tmp + "/" + dir + ".gguf";
      const Status st = convert_hf_to_gguf(g + dir, file, "q8_0", nullptr, 1);
      if (!st.is_ok()) setup_failed(st.message());
      out.bases.push_back(open_base(dir, file));
    }
    const Base gpt2 = open_base("gpt-2", shared + "/models/vocab/ggml-vocab-gpt-2.gguf");
    out.bases.push_back(with_tokenizer_of(out.bases[0], gpt2, "llama2-tiny-gpt2-vocab"));
    for (Base& b : out.bases) cut_vocab(b);
    std::set<std::string> keys;
    for (const Base& b : out.bases) {
      const std::string arch = arch_of(b);
      for (const auto& [k, v] : b.kv)
        keys.insert(!arch.empty() && k.rfind(arch + ".", 0) == 0 ? k.substr(arch.size()) : k);
    }
    out.keys.assign(keys.begin(), keys.end());
    std::filesystem::remove_all(tmp);
    out.path = "/tmp/hearth-fuzz-model-" + std::to_string(getpid()) + ".gguf";
    std::set<std::string> hf_keys;
    for (const char* dir : kHfDirs) {
      HfBase h{dir, g + dir, nlohmann::json::parse(std::ifstream(g + dir + "/config.json"))};
      for (const auto& [k, v] : h.config.items()) {
        hf_keys.insert(k);
        if (v.is_object())
          for (const auto& [k2, v2] : v.items()) hf_keys.insert(k + "." + k2);
      }
      out.hf.push_back(std::move(h));
    }
    out.hf_keys.assign(hf_keys.begin(), hf_keys.end());
    out.hf_dir = "/tmp/hearth-fuzz-model-" + std::to_string(getpid()) + "-hf";
    g_input_path = out.path, g_input_dir = out.hf_dir;
    std::atexit([] {  // (libFuzzer and the replay driver both leave through exit())
      std::error_code ec;
      std::filesystem::remove(g_input_path, ec);
      std::filesystem::remove_all(g_input_dir, ec);
    });
    return out;
  }();
  return s;
}

// The input as a stream of choices; past its end every read gives 0.
struct Reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint32_t u32() {
    return uint32_t(u8()) | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24;
  }
};

// Values that make counts, sizes and ids lie.
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max(), kMinInt = -kMaxInt - 1;
constexpr int64_t kInts[] = {
    0,          1,          2,         3,         -1,        4,         7,       8,      16,
    31,         32,         33,        64,        100,       127,       128,     255,    256,
    511,        512,        513,       1024,      4096,      32000,     65535,   65536,  0x7fffffff,
    0x80000000, 0xffffffff, 1ll << 32, 1ll << 40, 1ll << 53, 1ll << 62, kMaxInt, kMinInt};
constexpr double kFloats[] = {0.0,    -0.0,    1.0, -1.0, 0.5,      2.0,       1e-30, 1e30, 1e300,
                              -1e300, 65504.0, 1e6, NAN,  INFINITY, -INFINITY, 4.0,   32.0, 1e-5};
const char* const kStrings[] = {
    "llama",   "qwen2", "qwen3",    "qwen3moe",  "gemma2", "gemma3",   "phi3",  "gpt-oss",
    "mistral", "",      "\xff\xfe", "yarn",      "linear", "longrope", "none",  "gpt2",
    "bert",    "t5",    "default",  "llama-bpe", "gpt-4o", "tekken",   "qwen2", "{{ x }}",
    "<s>",     "a b",   "ab",       "\n",        "<0x41>", "silu"};
constexpr DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                            DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::MXFP4};

int64_t pick_int(Reader& r, int64_t now) {
  const uint8_t c = r.u8();
  switch (c % 4) {
    case 0:
      return kInts[r.u8() % std::size(kInts)];
    case 1:  // (wrapping, as the file's own integers may)
      return int64_t(uint64_t(now) + uint64_t(int64_t(int8_t(r.u8()))));
    case 2:
      return int64_t(uint64_t(now) * 2);
    default:
      return now / 2;
  }
}

GgufValue int_value(int64_t v) {
  GgufValue x;
  x.type = GgufType::INT64;
  x.i = v;
  x.u = uint64_t(v);
  return x;
}

// One edit of the base's metadata or tensor table.
void edit(Reader& r, std::vector<std::pair<std::string, GgufValue>>& kv,
          std::vector<TensorView>& tensors, const std::string& arch,
          const std::vector<std::string>& keys) {
  const uint8_t op = r.u8() % 11;
  if (op <= 5 && kv.empty()) return;
  if (op >= 7 && op <= 9 && tensors.empty()) return;
  const size_t ki = kv.empty() ? 0 : r.u32() % kv.size();
  GgufValue dropped;
  GgufValue& v = kv.empty() ? dropped : kv[ki].second;
  switch (op) {
    case 0:  // an integer (the old type when it was one)
      if (v.type == GgufType::ARRAY) return;
      {
        const int64_t now =
            v.type == GgufType::UINT64 || v.type == GgufType::UINT32 ? int64_t(v.u) : v.i;
        v = int_value(pick_int(r, now));
      }
      return;
    case 1:  // a float
      v = GgufValue{};
      v.type = r.u8() & 1 ? GgufType::FLOAT64 : GgufType::FLOAT32;
      v.f = kFloats[r.u8() % std::size(kFloats)];
      return;
    case 2: {  // another kind of value
      const uint8_t kind = r.u8() % 4;
      GgufValue x;
      if (kind == 0) x.type = GgufType::STRING, x.s = kStrings[r.u8() % std::size(kStrings)];
      if (kind == 1) x.type = GgufType::BOOL, x.b = r.u8() & 1, x.i = x.b, x.u = x.b;
      if (kind == 2) {
        x.type = GgufType::ARRAY, x.elem_type = GgufType::INT32;
        for (uint8_t i = 0, n = r.u8() % 8; i < n; ++i)
          x.ints.push_back(kInts[r.u8() % std::size(kInts)]);
      }
      if (kind == 3) {
        x.type = GgufType::ARRAY, x.elem_type = GgufType::STRING;
        for (uint8_t i = 0, n = r.u8() % 8; i < n; ++i)
          x.strings.push_back(kStrings[r.u8() % std::size(kStrings)]);
      }
      v = std::move(x);
      return;
    }
    case 3: {  // an array cut short or grown
      if (v.type != GgufType::ARRAY) return;
      const uint64_t n = v.array_size(), m = r.u8() & 1 ? n * r.u8() / 255 : n + r.u8() % 16;
      if (v.elem_type == GgufType::STRING)
        v.strings.resize(m, v.strings.empty() ? "" : v.strings.back());
      else if (v.elem_type == GgufType::FLOAT32 || v.elem_type == GgufType::FLOAT64)
        v.floats.resize(m, v.floats.empty() ? 0.0 : v.floats.back());
      else if (v.elem_type != GgufType::ARRAY)
        v.ints.resize(m, v.ints.empty() ? 0 : v.ints.back());
      return;
    }
    case 4: {  // one array element
      if (v.type != GgufType::ARRAY || v.array_size() == 0) return;
      const size_t i = r.u32() % v.array_size();
      if (i < v.ints.size()) v.ints[i] = pick_int(r, v.ints[i]);
      if (i < v.floats.size()) v.floats[i] = kFloats[r.u8() % std::size(kFloats)];
      if (i < v.strings.size()) v.strings[i] = kStrings[r.u8() % std::size(kStrings)];
      return;
    }
    case 5:  // a key dropped
      kv.erase(kv.begin() + long(ki));
      return;
    case 6: {  // a key another family has, as this family's
      const std::string& k = keys[r.u32() % keys.size()];
      const std::string name = k.rfind('.', 0) == 0 ? arch + k : k;
      const GgufValue x = int_value(kInts[r.u8() % std::size(kInts)]);
      for (auto& e : kv)
        if (e.first == name) return void(e.second = x);
      kv.emplace_back(name, x);
      return;
    }
    case 7: {  // a tensor dimension
      TensorView& t = tensors[r.u32() % tensors.size()];
      if (t.shape.empty()) return;
      int64_t& d = t.shape[r.u8() % t.shape.size()];
      d = pick_int(r, d);
      return;
    }
    case 8:  // a tensor's type
      tensors[r.u32() % tensors.size()].dtype = kTypes[r.u8() % std::size(kTypes)];
      return;
    case 9: {  // a tensor dropped, or two names swapped
      const size_t a = r.u32() % tensors.size(), b = r.u32() % tensors.size();
      if (r.u8() & 1)
        tensors.erase(tensors.begin() + long(a));
      else
        std::swap(tensors[a].name, tensors[b].name);
      return;
    }
    default:  // a tensor's rank changed
    {
      TensorView& t = tensors[r.u32() % tensors.size()];
      if (r.u8() & 1 && t.shape.size() > 1) {
        t.shape[1] *= t.shape[0];
        t.shape.erase(t.shape.begin());
      } else {
        t.shape.insert(t.shape.begin(), 1);
      }
      return;
    }
  }
}

// One edit of a config.json: a field (of any family) set to a value of some kind, or dropped.
void edit_config(Reader& r, nlohmann::json& c, const std::vector<std::string>& keys) {
  const std::string& key = keys[r.u32() % keys.size()];
  const size_t dot = key.find('.');
  nlohmann::json* obj = &c;
  std::string field = key;
  if (dot != std::string::npos) {
    nlohmann::json& parent = c[key.substr(0, dot)];
    if (!parent.is_object()) parent = nlohmann::json::object();
    obj = &parent;
    field = key.substr(dot + 1);
  }
  nlohmann::json& v = (*obj)[field];
  switch (r.u8() % 7) {
    case 0: {
      const int64_t now = v.is_number_integer() ? v.get<int64_t>() : 0;
      v = pick_int(r, now);
      return;
    }
    case 1: {
      const double f = kFloats[r.u8() % std::size(kFloats)];
      v = std::isfinite(f) ? nlohmann::json(f) : nlohmann::json(nullptr);  // (JSON has no NaN)
      return;
    }
    case 2:
      v = kStrings[r.u8() % std::size(kStrings)];
      return;
    case 3:
      v = r.u8() & 1 ? nlohmann::json(nullptr) : nlohmann::json(bool(r.u8() & 1));
      return;
    case 4:
      obj->erase(field);
      return;
    case 5: {  // a list, as layer_types or mlp_only_layers are
      static const char* const kItems[] = {"sliding_attention", "full_attention", "x"};
      v = nlohmann::json::array();
      for (uint8_t i = 0, n = r.u8() % 8; i < n; ++i) {
        if (r.u8() & 1)
          v.push_back(kItems[r.u8() % 3]);
        else
          v.push_back(kInts[r.u8() % std::size(kInts)]);
      }
      return;
    }
    default:  // an object, as rope_scaling is
      v = nlohmann::json{{"rope_type", kStrings[r.u8() % std::size(kStrings)]},
                         {"factor", kFloats[r.u8() % 8]},
                         {"original_max_position_embeddings", kInts[r.u8() % std::size(kInts)]}};
      return;
  }
}

// The input's directory: `base`'s files linked, its config.json written as edited.
std::string write_hf_dir(const Setup& s, const HfBase& base, const nlohmann::json& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove_all(s.hf_dir, ec);
  fs::create_directories(s.hf_dir);
  for (const auto& e : fs::directory_iterator(base.dir))
    if (e.path().filename() != "config.json" && e.path().filename() != "golden.safetensors")
      fs::create_symlink(e.path(), s.hf_dir + "/" + e.path().filename().string());
  // (invalid UTF-8 the edits put in strings is written as U+FFFD)
  std::ofstream(s.hf_dir + "/config.json")
      << config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.hf_dir;
}

// The contract for an error: one line that says something.
void check_message(const std::string& m) {
  if (!m.empty() && m.find('\n') == std::string::npos) return;
  std::fprintf(stderr, "fuzz_model: an error that is not one line: [%s]\n", m.c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Setup& s = setup();
  Reader r{data, size};
  const uint8_t pick = r.u8();
  std::string path;
  if (pick < 0x80) {
    const Base& base = s.bases[pick % s.bases.size()];
    auto kv = base.kv;
    auto tensors = base.tensors;
    const std::string arch = arch_of(base);
    for (int i = 0; i < 16 && !r.empty(); ++i) edit(r, kv, tensors, arch, s.keys);
    GgufWriter w;
    for (const auto& [k, v] : kv) w.set_value(k, v);
    for (const TensorView& t : tensors)
      w.add_tensor_ref(t.name, t.dtype, t.shape, t.data, t.nbytes);
    const std::vector<uint8_t> bytes = w.to_bytes();
    std::ofstream out(s.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    path = s.path;
  } else {
    const HfBase& base = s.hf[(pick - 0x80) % s.hf.size()];
    nlohmann::json config = base.config;
    for (int i = 0; i < 8 && !r.empty(); ++i) edit_config(r, config, s.hf_keys);
    path = write_hf_dir(s, base, config);
  }
  LoadOptions opt;
  opt.n_threads = 1;
  opt.use_weight_cache = false;  // (nothing written beside the test data)
  auto engine = Engine::load(path, opt);
  if (!engine.is_ok()) {
    check_message(engine.message());
    return 0;
  }
  const Tokenizer& tok = (*engine)->tokenizer();
  const Model& model = (*engine)->model();
  std::vector<int32_t> ids =
      tok.encode("Hello world, <s> \xc3\xb1 \xf0\x9f\x98\x80\n\t123", true, true);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  (void)tok.decode(ids);
  if (ids.empty()) ids.push_back(0);
  if (ids.size() > 4) ids.resize(4);
  auto cache = model.new_kv_cache(16);
  if (!cache.is_ok()) {
    check_message(cache.message());
    return 0;
  }
  ForwardScratch scratch;
  std::vector<float> logits;
  Status st = model.prefill(*cache, ids, scratch, &logits);
  if (st.is_ok()) st = model.decode(*cache, ids[0], scratch, &logits);
  if (!st.is_ok()) check_message(st.message());
  // A session of the model's own context (the C API's n_ctx 0), however long the file says it
  // is: its cache comes from the engine's pool, committed as it is used.
  Session session(*engine, 0);
  st = session.init();
  if (st.is_ok()) st = session.evaluate(ids, &logits);
  if (!st.is_ok()) check_message(st.message());
  return 0;
}
