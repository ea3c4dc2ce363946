// `hearth quantize IN.gguf OUT.gguf TYPE`: re-encode a GGUF's weight matrices with
// llama-quantize's per-tensor rules. The work is in src/runtime/convert; this file is only flags.
#include <cstdio>

#include "command.h"
#include "runtime/convert/convert-progress.h"
#include "runtime/convert/convert.h"

namespace hearth::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
  bool quiet = false;
};

void setup(CLI::App& root) {
  static QuantizeArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("quantize", "re-encode a GGUF model's weights as another type");
  cmd->add_option("input", a->in, "input GGUF file")->required();
  cmd->add_option("output", a->out, "output GGUF file")->required();
  cmd->add_option("type", a->type, output_type_names())->required();
  cmd->add_option("-t,--threads", a->threads, "quantizer threads (default: all cores)");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a] {
    check(quantize_gguf(a->in, a->out, a->type, console_progress(stderr, a->quiet), a->threads));
    if (!a->quiet) std::fprintf(stderr, "wrote %s\n", a->out.c_str());
  });
}

}  // namespace

HEARTH_REGISTER_COMMAND(72, setup);

}  // namespace hearth::cli
