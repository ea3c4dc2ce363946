// hearth-cuda-bench's sampled-pick table (cuda-bench-sample.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace hearth::cuda_bench {

// The device picks over one row of logits (32k, 128k and 152k ids; logits spread as a trained
// model's, as a random-weight model's, and uniformly): the greedy argmax against sampled rules
// (chat defaults, with top-k 40, top-p alone), us a pick; then a served step's draws for 8 and
// 32 rows in one launch. False on an error.
bool sample_pick_table(cudaStream_t s);

}  // namespace hearth::cuda_bench
