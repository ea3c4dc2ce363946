#include "backend/placement.h"

#include <algorithm>
#include <cstdio>

#include "backend/backend.h"

namespace hearth {

int64_t auto_gpu_layers(uint64_t free_bytes, uint64_t fixed_bytes, uint64_t per_layer_bytes,
                        int64_t n_layer) {
  if (n_layer <= 0 || free_bytes <= fixed_bytes) return 0;
  if (per_layer_bytes == 0) return n_layer;
  return int64_t(
      std::min<uint64_t>(uint64_t(n_layer), (free_bytes - fixed_bytes) / per_layer_bytes));
}

int64_t requested_gpu_layers(int requested, int64_t n_layer) {
  if (n_layer <= 0) return 0;
  return requested < 0 ? n_layer : std::min<int64_t>(requested, n_layer);  // all, auto
}

bool experts_on_cpu(int cpu_moe, int64_t layer) {
  return cpu_moe == kCpuMoeAll || (cpu_moe > 0 && layer < cpu_moe);
}

LayerPlacement place_layers(int requested, int64_t n_layer, uint32_t needed_features,
                            const GpuCandidate* gpu, const std::string& gpu_error,
                            const std::function<GpuLayerCosts()>& costs) {
  LayerPlacement out;
  const int64_t wanted = requested_gpu_layers(requested, n_layer);
  if (wanted == 0) return out;
  if (!gpu) {
    out.gpu_refused = gpu_error.empty() ? "no GPU backend" : gpu_error;
    return out;
  }
  if (const uint32_t missing = needed_features & ~gpu->features) {
    out.gpu_refused =
        gpu->name + " does not run this model's " + backend_feature_names(missing) + " yet";
    return out;
  }
  out.gpu_layers = wanted;
  if (requested != kGpuLayersAuto || !costs) return out;
  const GpuLayerCosts c = costs();
  if (!c.free_bytes) return out;
  out.gpu_layers = auto_gpu_layers(*c.free_bytes, c.fixed_bytes, c.per_layer_bytes, n_layer);
  char line[256];
  std::snprintf(line, sizeof line,
                "--gpu-layers auto: %lld of %lld layers on the GPU (%.1f GiB free, %.2f GiB a "
                "layer with its KV at context %lld)",
                (long long)out.gpu_layers, (long long)n_layer,
                double(*c.free_bytes) / double(1ull << 30),
                double(c.per_layer_bytes) / double(1ull << 30), (long long)c.ctx);
  out.auto_note = line;
  return out;
}

}  // namespace hearth
