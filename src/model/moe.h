// Mixture-of-experts routing: which experts each token's FFN goes through, and with what weight.
// The MoE block itself is Model::moe_block (model/moe.cpp), one matmul per expert over the rows
// routed to it.
#pragma once

#include <cstdint>

namespace hearth {

// logits [T, n_expert] (the router's output) -> experts / weights [T, k]: softmax over all
// n_expert logits, the k largest probabilities in descending order (ties: the lower expert
// index first; NaN ranks below every number), divided by their sum when `renormalise`
// (Mixtral; Qwen3-MoE's norm_topk_prob). Precondition: 1 <= k <= n_expert.
void route_top_k(const float* logits, int64_t T, int64_t n_expert, int64_t k, bool renormalise,
                 int32_t* experts, float* weights);

}  // namespace hearth
