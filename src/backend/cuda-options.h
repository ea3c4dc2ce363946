// What a CUDA backend does, chosen when it is made (make_gpu_backend / make_cuda_backend) and
// fixed for its life. The defaults are the measured fastest (docs/performance-cuda.md); the
// switches exist for users (graphs, chaining, profile) and for A/B runs of one fused path
// against its plain form. A new choice: a field here with the current behaviour as its default,
// read in CudaBackend::init — never an environment variable.
#pragma once

#include <string>

namespace hearth {

struct CudaOptions {
  // Decode steps captured once into a CUDA graph and replayed (false: every step launches its
  // kernels one by one; also turns greedy chaining off, which replays graphs only).
  bool graphs = true;
  // Greedy decode steps queued ahead of the host, the argmax on the device
  // (backend/cuda/cuda-picks.h): 0 turns chaining off (decode + host argmax per token),
  // 1..kMaxGreedyChainDepth that many.
  int greedy_chain_depth = 3;
  static constexpr int kMaxGreedyChainDepth = 8;
  // Per-op timing of decode steps and prefill passes, printed to stderr (slower: profiled steps
  // run eagerly).
  bool profile = false;
  // Host threads copying weights from the mapped file into pinned memory at load
  // (cuda-weight-upload.h); 0: min(8, hardware threads), which keeps a PCIe 5 link busy.
  int upload_threads = 0;
  static constexpr int kMaxUploadThreads = 64;
  // Each new KV cache's first block of device memory mapped by a background thread as the cache
  // is made (backend/cuda/cuda-kv-memory.h), within the parked-memory limit: a server's first
  // requests then make no driver calls on the step's path (false: mapped as rows are used).
  bool kv_map_ahead = true;
  // Every kernel of the engine loaded onto the device by a background thread once the weights
  // are up (kernels/cuda/kernel-modules.cuh), instead of at each kernel's first launch, which
  // stalls that step by milliseconds. On for `hearth serve` (a fresh server's first requests),
  // off for one-shot commands, which launch a small part of the kernels.
  bool preload_kernels = false;
  // Quantized matmul weights keep an fp16 copy on the device (2 bytes a weight: ~13.5 GB for a
  // 7B model on top of its quantized bytes), made at each weight's first GEMM where the device
  // has the memory to spare (backend/cuda/cuda-weights.h): prefill GEMMs then skip dequantizing
  // W every call, and passes of more than 64 rows (a prompt, or a decode step of that many
  // sequences) run cuBLAS on it instead of the batched int8 matmul.
  bool half_weights = true;
  // One-token Q6_K GEMVs copy each block's weight rows into shared memory before they wait for
  // the kernel before them (kernels/cuda/gemv-int8.cu), so the copy overlaps that kernel (false:
  // the rows are loaded after the wait, as every other dtype's are).
  bool gemv_ahead = true;

  // A/B switches, each off = the plain form of one fusion:
  bool fuse = true;             // decode launches fused (false: every op its own launch)
  bool fp8_prefill = true;      // F16/BF16 prefill GEMMs: x_lo pass in FP8 (else a second fp16)
  bool prefill_x_cache = true;  // Q/K/V (gate/up) convert their shared x once per prefill
  bool matmul_add = true;       // prefill residual adds inside the GEMM (beta = 1)
  bool producer_split = true;   // prefill rmsnorm/swiglu write the next GEMM's split x (needs fuse)
  bool rope_rows_kv = true;     // prefill rope q/k + K/V append as one launch
};

// "" when the options are usable, else one line naming the bad field.
inline std::string cuda_options_error(const CudaOptions& o) {
  if (o.greedy_chain_depth < 0 || o.greedy_chain_depth > CudaOptions::kMaxGreedyChainDepth)
    return "greedy chain depth " + std::to_string(o.greedy_chain_depth) + " is outside 0.." +
           std::to_string(CudaOptions::kMaxGreedyChainDepth);
  if (o.upload_threads < 0 || o.upload_threads > CudaOptions::kMaxUploadThreads)
    return "upload threads " + std::to_string(o.upload_threads) + " is outside 0.." +
           std::to_string(CudaOptions::kMaxUploadThreads);
  return "";
}

}  // namespace hearth
