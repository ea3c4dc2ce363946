// `hearth logits`: the full causal logits [T, n_vocab] of a token sequence, as safetensors.
#include <cstring>

#include "command.h"
#include "common.h"
#include "formats/safetensors.h"
#include "runtime/session.h"

namespace hearth::cli {
namespace {

struct LogitsArgs {
  RuntimeArgs rt;
  std::string tokens_text, out;
};

void run(const LogitsArgs& a) {
  auto engine = load_engine_or_exit(a.rt, true);
  const std::vector<int32_t> ids = parse_token_list(a.tokens_text);
  const int64_t n_ctx = std::max<int64_t>(int64_t(ids.size()), context_size(a.rt, *engine));
  Session session(engine, n_ctx, kv_cache_types(a.rt));
  check(session.init());
  std::vector<float> logits = check(session.all_logits(ids));
  OwnedTensor t;
  t.name = "logits";
  t.dtype = DType::F32;
  t.shape = {int64_t(ids.size()), engine->model().hparams().n_vocab};
  t.bytes.resize(logits.size() * sizeof(float));
  std::memcpy(t.bytes.data(), logits.data(), t.bytes.size());
  check(write_safetensors(a.out, {t}));
}

void setup(CLI::App& root) {
  static LogitsArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("logits", "write the logits of every position to safetensors");
  add_runtime_options(cmd, &a->rt);
  cmd->add_option("--tokens", a->tokens_text, "token ids 1,2,3")->required();
  cmd->add_option("-o,--output", a->out, "output .safetensors file")->required();
  cmd->callback([a] { run(*a); });
}

HEARTH_REGISTER_COMMAND(20, setup);

}  // namespace
}  // namespace hearth::cli
