// `hearth convert HF_DIR -o OUT.gguf --type T`: a Hugging Face checkpoint into a GGUF file that
// llama.cpp and Hearth load. The work is in src/runtime/convert; this file is only flags.
#include <cstdio>

#include "command.h"
#include "runtime/convert/convert-progress.h"
#include "runtime/convert/convert.h"

namespace hearth::cli {
namespace {

struct ConvertArgs {
  std::string dir, out, type = "bf16";
  int threads = 0;
  bool quiet = false;
};

void setup(CLI::App& root) {
  static ConvertArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("convert", "convert a Hugging Face model directory to GGUF");
  cmd->add_option("dir", a->dir, "model directory (config.json, *.safetensors, tokenizer)")
      ->required();
  cmd->add_option("-o,--output", a->out, "output GGUF file")->required();
  cmd->add_option("--type", a->type, "output type: " + output_type_names() + " (default bf16)");
  cmd->add_option("-t,--threads", a->threads, "quantizer threads (default: all cores)");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a] {
    check(convert_hf_to_gguf(a->dir, a->out, a->type, console_progress(stderr, a->quiet),
                             a->threads));
    if (!a->quiet) std::fprintf(stderr, "wrote %s\n", a->out.c_str());
  });
}

}  // namespace

HEARTH_REGISTER_COMMAND(70, setup);

}  // namespace hearth::cli
