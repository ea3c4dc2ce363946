// gpt-oss's Hugging Face experts, stacked and laid out for x @ W (transformers' GptOssExperts):
// gate_up_proj [n_expert, n_embd, 2 * n_ff] with gate in the even columns and up in the odd
// ones, down_proj [n_expert, n_ff, n_embd], gate_up_proj_bias [n_expert, 2 * n_ff] (interleaved
// the same way), down_proj_bias [n_expert, n_embd]. These turn one expert's part into Hearth's
// row-major {d_out, d_in} form; the loader and `hearth convert` share them.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "tensor/tensor-view.h"

namespace hearth {

enum class StackedExpertPart { kGate, kUp, kDown };

// Expert e's matrix in the stacked tensor's own dtype (F32, F16 or BF16; element copies, so
// exact): gate / up [n_ff, n_embd] from gate_up_proj, down [n_embd, n_ff] from down_proj.
// Precondition: `stacked` is 3-D with shape checked by the caller, 0 <= e < shape[0].
Status stacked_expert_matrix(const TensorView& stacked, int64_t e, StackedExpertPart part,
                             std::vector<uint8_t>& out);

// Expert e's bias as f32: gate / up [n_ff] from gate_up_proj_bias, down [n_embd] from
// down_proj_bias. Precondition: `stacked` is 2-D, shape checked by the caller.
Status stacked_expert_bias(const TensorView& stacked, int64_t e, StackedExpertPart part,
                           std::vector<float>& out);

}  // namespace hearth
