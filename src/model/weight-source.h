// How the loader finds a model's tensors in either convention (GGUF file, HF directory) and
// checks each one's shape and type; an MoE layer's tensors (model/moe-weights.cpp) go through it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"
#include "model/tensor-names.h"

namespace hearth {

using FindTensor = std::function<const TensorView*(const std::string&)>;

struct Source {
  FindTensor find;
  std::function<std::string(TensorRole, int64_t)> name;
  // HF: one tensor per expert (role, layer, expert), or a stacked family's names (expert
  // ignored); GGUF: none (stacked tensors only).
  std::function<std::string(TensorRole, int64_t, int64_t)> expert;
};

// Looks up a tensor and checks its shape and that Hearth can compute with its type; a missing
// optional tensor is an empty Weight.
Result<Weight> take_weight(const FindTensor& find, const std::string& name,
                           const std::vector<int64_t>& shape, bool required = true);

// An MoE layer l's router, experts and (ArchSpec::moe_biases) their biases into lw: GGUF's
// stacked tensors as per-expert views, HF's per-expert tensors, or HF's stacked gpt-oss layout
// de-interleaved and transposed into buffers appended to `owned` (which outlive the model's use).
Status take_moe_layer(const ArchSpec& arch, const HParams& hp, const Source& src, int64_t l,
                      LayerWeights& lw, std::vector<std::vector<uint8_t>>& owned);

}  // namespace hearth
