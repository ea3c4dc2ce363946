// `hearth info`: what a model is: architecture, sizes, tensor types, tokenizer, context length.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"

namespace hearth::cli {
namespace {

struct InfoArgs {
  RuntimeArgs rt;
  bool json = false;
};

void run(const InfoArgs& a) {
  auto engine = load_engine_or_exit(a.rt, true);
  const Model& m = engine->model();
  const HParams& hp = m.hparams();
  const Tokenizer& tok = engine->tokenizer();
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, count] : m.weight_type_counts()) types[name] = count;
  nlohmann::json j = {
      {"path", engine->path()},
      {"name", engine->name()},
      {"format", m.source_format()},
      {"architecture", m.arch().gguf_name},
      {"n_vocab", hp.n_vocab},
      {"n_embd", hp.n_embd},
      {"n_layer", hp.n_layer},
      {"n_head", hp.n_head},
      {"n_head_kv", hp.n_head_kv},
      {"head_dim", hp.head_dim},
      {"n_ff", hp.n_ff},
      {"n_expert", hp.n_expert},
      {"n_expert_used", hp.n_expert_used},
      {"context_length", hp.n_ctx_train},
      {"rms_eps", hp.rms_eps},
      {"rope_theta", hp.rope_theta},
      {"rope_scaling", hp.rope_scaling},
      {"tied_embeddings", hp.tied_embeddings},
      {"weight_bytes", m.weight_bytes()},
      {"tensor_types", types},
      {"tokenizer",
       {{"kind", tok.kind()},
        {"n_vocab", tok.n_vocab()},
        {"bos_id", tok.bos_id()},
        {"eos_id", tok.eos_id()},
        {"add_bos", tok.add_bos()}}},
      {"chat_template", !engine->chat_template().empty()},
  };
  if (a.json) {
    std::puts(j.dump(2).c_str());
    return;
  }
  std::printf("model:          %s\n", engine->path().c_str());
  std::printf("name:           %s\n", engine->name().c_str());
  std::printf("format:         %s\n", m.source_format().c_str());
  std::printf("architecture:   %s\n", m.arch().gguf_name.c_str());
  std::printf("layers:         %lld\n", (long long)hp.n_layer);
  std::printf("embedding:      %lld\n", (long long)hp.n_embd);
  std::printf("heads (q/kv):   %lld / %lld, head_dim %lld\n", (long long)hp.n_head,
              (long long)hp.n_head_kv, (long long)hp.head_dim);
  std::printf("feed-forward:   %lld\n", (long long)hp.n_ff);
  if (hp.n_expert > 0)
    std::printf("experts:        %lld, %lld per token, width %lld\n", (long long)hp.n_expert,
                (long long)hp.n_expert_used, (long long)hp.n_ff_exp);
  std::printf("vocabulary:     %lld\n", (long long)hp.n_vocab);
  std::printf("context length: %lld\n", (long long)hp.n_ctx_train);
  std::printf("rope:           theta %g, scaling %s\n", hp.rope_theta, hp.rope_scaling.c_str());
  std::printf("weights:        %.2f MiB\n", double(m.weight_bytes()) / 1048576.0);
  std::string ts;
  for (const auto& [name, count] : m.weight_type_counts())
    ts += (ts.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  std::printf("tensor types:   %s\n", ts.c_str());
  std::printf("tokenizer:      %s, %d tokens, bos %d, eos %d\n", tok.kind().c_str(), tok.n_vocab(),
              tok.bos_id(), tok.eos_id());
  std::printf("chat template:  %s\n", engine->chat_template().empty() ? "none" : "yes");
}

void setup(CLI::App& root) {
  static InfoArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("info", "describe a model");
  add_runtime_options(cmd, &a->rt);
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->callback([a] { run(*a); });
}

HEARTH_REGISTER_COMMAND(40, setup);

}  // namespace
}  // namespace hearth::cli
