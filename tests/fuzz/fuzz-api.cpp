// libFuzzer entry point for the server's request parsers: a body as a client sends it to
// /v1/chat/completions, /v1/completions, /v1/embeddings, /api/generate, /api/chat, /api/embed
// or /api/show, parsed against a real engine (kjv-13m from $HEARTH_SHARED, loaded once) as
// `hearth serve` parses it. The first byte picks the route. The contract: bad input is a 400
// (or 413) with a one-line message, never an exception (the server would answer a 500) and
// never a crash; a body the parser takes yields a job.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ollama-api.h"
#include "openai-api.h"
#include "runtime/chat-format.h"

using namespace hearth;
using namespace hearth::server;

namespace {

struct Setup {
  std::shared_ptr<Engine> engine;
  ApiConfig cfg;
};

// The engine and the server's settings, made once: a model load per input would leave the
// fuzzer no time for the parsers.
const Setup& setup() {
  static const Setup s = [] {
    Setup out;
    const char* env = std::getenv("HEARTH_SHARED");
    const std::string shared = env && *env ? env : HEARTH_SHARED_DEFAULT_DIR;
    const std::string path = shared + "/goldens/kjv-13m/kjv-13m-q8_0.gguf";
    LoadOptions opt;
    opt.n_threads = 1;
    opt.use_weight_cache = false;  // (nothing written beside the test data)
    auto engine = Engine::load(path, opt);
    if (!engine.is_ok()) {
      std::fprintf(stderr, "fuzz_api: cannot load %s: %s\n", path.c_str(),
                   engine.message().c_str());
      std::abort();  // a target that parses nothing must not pass
    }
    out.engine = *engine;
    out.cfg.model_id = "kjv-13m";
    out.cfg.ctx_size = 512;
    out.cfg.slots = 4;
    // ChatML renders any sequence of roles (tool turns included), so more bodies get through
    // to the checks after the prompt.
    auto format = resolve_chat_format(*out.engine, "", "chatml");
    if (!format.is_ok()) std::abort();
    out.cfg.chat_template = format->template_text;
    out.cfg.chat_stops = format->stops;
    out.cfg.chat_tokenizer = format->tokenizer;
    return out;
  }();
  return s;
}

void check_message(int status, const std::string& message) {
  if ((status != 400 && status != 413) || message.empty() ||
      message.find('\n') != std::string::npos)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Setup& s = setup();
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int route = data[0] % 7;
  try {
    if (route <= 1) {
      ApiError err;
      auto r = parse_completion(s.cfg, *s.engine, body, route == 0, &err);
      if (!r) {
        check_message(err.status, err.message);
      } else if (!r->job || r->choices.empty()) {
        __builtin_trap();
      }
    } else if (route == 2) {
      ApiError err;
      bool base64 = false;
      if (!parse_embeddings(s.cfg, *s.engine, body, &base64, &err))
        check_message(err.status, err.message);
    } else if (route <= 4) {
      OllamaError err;
      auto r = parse_ollama_generate(s.cfg, *s.engine, body, route == 4, &err);
      if (!r)
        check_message(err.status, err.message);
      else if (!r->load_only && !r->job)
        __builtin_trap();
    } else if (route == 5) {
      OllamaError err;
      if (!parse_ollama_embed(s.cfg, *s.engine, body, false, &err))
        check_message(err.status, err.message);
    } else {
      OllamaError err;
      if (!parse_ollama_show(s.cfg, body, &err)) check_message(err.status, err.message);
    }
  } catch (...) {
    __builtin_trap();  // the server would answer the client's mistake with a 500
  }
  return 0;
}
