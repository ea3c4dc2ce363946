// The GPU placement of golden_test's runs: `golden_test --gpu-layers=N|all` puts N (all) layers
// on the GPU backend (scripts/cuda-check.sh); without it everything runs on the CPU.
#pragma once

namespace hearth {

// The LoadOptions::gpu_layers every golden run loads with: 0 (CPU only), N, or -1 (all).
int test_gpu_layers();

}  // namespace hearth
