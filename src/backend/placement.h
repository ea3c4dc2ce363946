// Which layers run where. A model's leading layers go to the GPU backend and the rest to the
// CPU (one group each, so activations cross once per step): how many follows from --gpu-layers,
// from what the GPU backend can run (its features) and, for `auto`, from what fits its free
// memory. The loader (model/loader.cpp) makes the backends and prepares weights on this plan.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace hearth {

constexpr int kGpuLayersAll = -1;
// As many leading layers as fit the GPU's free memory (weights, their KV at the context the
// caller will use, a reserve for scratch): auto_gpu_layers below.
constexpr int kGpuLayersAuto = -2;

// How many of n_layer layers fit `free_bytes` when `fixed_bytes` (embedding, LM head, scratch
// reserve) must fit too and each layer takes `per_layer_bytes`; at most n_layer, at least 0.
int64_t auto_gpu_layers(uint64_t free_bytes, uint64_t fixed_bytes, uint64_t per_layer_bytes,
                        int64_t n_layer);

// What a model costs on a GPU, for `auto`. free_bytes: the device's free memory now (nullopt:
// the backend does not budget its memory, so every layer is placed).
struct GpuLayerCosts {
  std::optional<uint64_t> free_bytes;
  uint64_t fixed_bytes = 0;      // embedding, LM head, activations, library workspaces
  uint64_t per_layer_bytes = 0;  // one layer's weights and its KV rows at `ctx`
  int64_t ctx = 0;               // the context the KV estimate assumed (for the message)
};

// The GPU backend on offer: its name and Backend::Feature bits.
struct GpuCandidate {
  std::string name;
  uint32_t features = 0;
};

struct LayerPlacement {
  int64_t gpu_layers = 0;   // layers [0, gpu_layers) on the GPU, the rest on the CPU
  std::string gpu_refused;  // non-empty: why layers asked for on the GPU run on the CPU
  std::string auto_note;    // non-empty: what `auto` chose and why, one line
};

// requested: LoadOptions::gpu_layers (a count, kGpuLayersAll or kGpuLayersAuto). gpu: the GPU
// backend made for the request, or nullptr with `gpu_error` saying why none could be made.
// needed_features: the Backend::Feature bits the model's blocks use; a GPU lacking one runs no
// layer, since a missing op must never be a silent wrong answer. costs: asked only for `auto`.
LayerPlacement place_layers(int requested, int64_t n_layer, uint32_t needed_features,
                            const GpuCandidate* gpu, const std::string& gpu_error,
                            const std::function<GpuLayerCosts()>& costs);

// --cpu-moe / --n-cpu-moe N (LoadOptions::cpu_moe, as llama.cpp's flags): the MoE layers whose
// router and experts stay on the CPU while the rest of the layer runs where place_layers put
// it, the split that lets a large sparse model's attention run on a small GPU. 0: none; N > 0:
// layers [0, N); kCpuMoeAll: every layer.
constexpr int kCpuMoeAll = -1;
bool experts_on_cpu(int cpu_moe, int64_t layer);

// The layer count asked for before any GPU is consulted: at most n_layer, all of them for
// kGpuLayersAll and kGpuLayersAuto.
int64_t requested_gpu_layers(int requested, int64_t n_layer);

}  // namespace hearth
