// Mixture-of-experts routing: which experts each token's FFN goes through, and with what weight
// (ops.h route_top_k, the rule every backend's router follows). The MoE block itself is
// Model::moe_block (model/moe.cpp), which hands the layer to Backend::moe_ffn.
#pragma once

#include "kernels/ops.h"

namespace hearth {

using kernels::route_top_k;

}  // namespace hearth
