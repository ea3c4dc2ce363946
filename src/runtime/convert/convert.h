// `hearth convert` (Hugging Face directory -> GGUF) and `hearth quantize` (GGUF -> GGUF), writing
// files llama.cpp loads. A new output type = a row in quant-plan.cpp; a new family = model/arch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace hearth {

// One event per tensor written, so callers can draw a bar or print a line.
struct ConvertProgress {
  int64_t index = 0;        // 0-based tensor index
  int64_t count = 0;        // tensors in the output
  std::string name;         // GGUF tensor name
  std::string type;         // output dtype name ("Q4_K")
  std::string shape;        // "[32000, 4096]"
  uint64_t bytes_done = 0;  // output tensor bytes written so far, this one included
  uint64_t bytes_total = 0;
};
using ConvertProgressFn = std::function<void(const ConvertProgress&)>;

// Names accepted by --type / TYPE (f32 f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k), for help text.
std::string output_type_names();

// Converts the checkpoint in `dir` (config.json, *.safetensors, tokenizer.model or
// tokenizer.json, tokenizer_config.json) into `out`. Peak memory is about one tensor.
Status convert_hf_to_gguf(const std::string& dir, const std::string& out, const std::string& type,
                          const ConvertProgressFn& progress = nullptr, int n_threads = 0);

// Re-encodes every weight matrix of `in` as `type` (dequantize -> f32 -> quantize) with
// llama-quantize's per-tensor rules; metadata is copied with general.file_type updated.
Status quantize_gguf(const std::string& in, const std::string& out, const std::string& type,
                     const ConvertProgressFn& progress = nullptr, int n_threads = 0);

}  // namespace hearth
