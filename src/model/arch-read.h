// Reading a file's description of its model (GGUF metadata or config.json) into the flat form
// the forward pass walks (HParams, RoPE tables), and the consistency rules both sources share.
// Errors name the key or field; the loader prefixes the file. A new hyper-parameter: read it in
// both readers (arch-gguf.cpp, arch-hf.cpp), check it in check_model_spec, write it in
// runtime/convert/convert-hf.cpp.
#pragma once

#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace hearth {

class GgufFile;
struct HfConfig;

struct ModelSpec {
  const ArchSpec* arch = nullptr;
  HParams hp;
  std::vector<RopeTable> rope = std::vector<RopeTable>(1);  // [0] global, [1] sliding layers'
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalves;
};

// More layers, and wider heads, than any model has (the largest have a few hundred layers and
// heads of 256): a count past them is a file's lie, refused before per-layer and RoPE tables are
// sized by it (both readers, then check_model_spec).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeadDim = 1024;

Result<ModelSpec> read_gguf_spec(const GgufFile& f);
Result<ModelSpec> read_hf_spec(const HfConfig& c);

// Rules every source must satisfy: head counts and dims, rotary dims, windows, caps, scales.
Status check_model_spec(const ModelSpec& s);

// The activation named by HF's hidden_act / hidden_activation, or an error naming `field`.
Result<FfnActivation> activation_from_hf(const std::string& name, const std::string& field);

}  // namespace hearth
