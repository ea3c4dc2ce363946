// The two commands that write a GGUF file (the work is in src/runtime/convert; this file is only
// flags):
//   `hearth convert HF_DIR -o OUT.gguf --type T`: a Hugging Face checkpoint into a GGUF file that
//   llama.cpp and Hearth load.
//   `hearth quantize IN.gguf OUT.gguf TYPE`: re-encode a GGUF's weight matrices with
//   llama-quantize's per-tensor rules.
#include <cstdio>

#include "command.h"
#include "runtime/convert/convert-progress.h"
#include "runtime/convert/convert.h"

namespace hearth::cli {
namespace {

// What both commands take: the source (a directory or a GGUF file), the output and its type,
// and how the quantizer runs.
struct WriteArgs {
  std::string source, out, type;
  int threads = 0;
  bool quiet = false;
};

using WriteJob = Status (*)(const std::string& source, const std::string& out,
                            const std::string& type, const ConvertProgressFn& progress,
                            int n_threads);

// The flags after the positional ones, and the callback that runs the job.
void finish_write_command(CLI::App* cmd, WriteArgs* a, WriteJob job) {
  cmd->add_option("-t,--threads", a->threads, "quantizer threads (default: all cores)");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a, job] {
    check(job(a->source, a->out, a->type, console_progress(stderr, a->quiet), a->threads));
    if (!a->quiet) std::fprintf(stderr, "wrote %s\n", a->out.c_str());
  });
}

void setup_convert(CLI::App& root) {
  static WriteArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  a->type = "bf16";
  auto* cmd = root.add_subcommand("convert", "convert a Hugging Face model directory to GGUF");
  cmd->add_option("dir", a->source, "model directory (config.json, *.safetensors, tokenizer)")
      ->required();
  cmd->add_option("-o,--output", a->out, "output GGUF file")->required();
  cmd->add_option("--type", a->type, "output type: " + output_type_names() + " (default bf16)");
  finish_write_command(cmd, a, convert_hf_to_gguf);
}

void setup_quantize(CLI::App& root) {
  static WriteArgs args;
  auto* a = &args;
  auto* cmd = root.add_subcommand("quantize", "re-encode a GGUF model's weights as another type");
  cmd->add_option("input", a->source, "input GGUF file")->required();
  cmd->add_option("output", a->out, "output GGUF file")->required();
  cmd->add_option("type", a->type, output_type_names())->required();
  finish_write_command(cmd, a, quantize_gguf);
}

}  // namespace

HEARTH_REGISTER_COMMAND(70, setup_convert);
HEARTH_REGISTER_COMMAND(72, setup_quantize);

}  // namespace hearth::cli
