// Ollama's documents about the loaded model: /api/tags, /api/ps, /api/show and /api/version
// (ollama-api.h). Hearth serves one model for its lifetime, so each describes that model from its
// checkpoint: tensor sizes, weight types, hyperparameters and its own chat template.
#include <cctype>
#include <chrono>
#include <cstdio>

#include "formats/gguf.h"
#include "ollama-api.h"

namespace hearth::server {

namespace {

// "13.6M", "7.2B": Ollama's parameter_size, from the checkpoint's tensor sizes when it is GGUF.
std::string parameter_size(const Engine& engine) {
  double n = 0;
  if (const GgufFile* g = engine.model().gguf())
    for (const auto& t : g->tensors()) n += double(t.numel());
  if (n <= 0) return "";
  const char* unit = n >= 1e9 ? "B" : n >= 1e6 ? "M" : "K";
  const double scaled = n >= 1e9 ? n / 1e9 : n >= 1e6 ? n / 1e6 : n / 1e3;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%s", scaled, unit);
  return buf;
}

// The weight type most matrices have, upper-case ("Q8_0"), as Ollama's quantization_level.
std::string quantization_level(const Engine& engine) {
  std::string best;
  int best_count = 0;
  for (const auto& [type, count] : engine.model().weight_type_counts())
    if (count > best_count) best = type, best_count = count;
  for (char& c : best) c = char(std::toupper(static_cast<unsigned char>(c)));
  return best;
}

json details(const Engine& engine) {
  const std::string family = engine.model().arch().gguf_name;
  return json{{"parent_model", ""},
              {"format", engine.model().source_format()},
              {"family", family},
              {"families", json::array({family})},
              {"parameter_size", parameter_size(engine)},
              {"quantization_level", quantization_level(engine)}};
}

json model_entry(const ApiConfig& cfg, const Engine& engine) {
  return json{{"name", cfg.model_id},
              {"model", cfg.model_id},
              {"modified_at", ollama_time(std::chrono::system_clock::now())},
              {"size", engine.model().weight_bytes()},
              {"digest", ""},
              {"details", details(engine)}};
}

}  // namespace

json ollama_tags(const ApiConfig& cfg, const Engine& engine) {
  return json{{"models", json::array({model_entry(cfg, engine)})}};
}

json ollama_ps(const ApiConfig& cfg, const Engine& engine) {
  json m = model_entry(cfg, engine);
  m.erase("modified_at");
  // Loaded for the server's lifetime: Ollama's clients read a far expiry as "kept loaded".
  m["expires_at"] = "2318-01-01T00:00:00Z";
  m["size_vram"] = 0;
  return json{{"models", json::array({m})}};
}

json ollama_show(const ApiConfig& cfg, const Engine& engine) {
  const HParams& hp = engine.model().hparams();
  const std::string a = engine.model().arch().gguf_name;
  json info = {{"general.architecture", a},
               {a + ".context_length", hp.n_ctx_train},
               {a + ".embedding_length", hp.n_embd},
               {a + ".block_count", hp.n_layer},
               {a + ".attention.head_count", hp.n_head},
               {a + ".attention.head_count_kv", hp.n_head_kv},
               {a + ".feed_forward_length", hp.n_ff},
               {a + ".rope.freq_base", hp.rope_theta},
               {"tokenizer.vocab_size", hp.n_vocab}};
  json capabilities = json::array({"completion", "embedding"});
  // Templates are Jinja here, not Go templates: `template` carries the model's own text.
  return json{{"modelfile", ""},
              {"parameters", ""},
              {"template", cfg.chat_template},
              {"details", details(engine)},
              {"model_info", std::move(info)},
              {"capabilities", std::move(capabilities)},
              {"modified_at", ollama_time(std::chrono::system_clock::now())}};
}

json ollama_version() {
  return json{{"version", HEARTH_VERSION_STRING}};
}

}  // namespace hearth::server
