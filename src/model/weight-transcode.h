// Weights in a type that has no kernels but whose values another type holds exactly, rewritten
// into that type at load. Today: Q3_K (the bulk of llama-quantize's Q3_K_S / Q3_K_M / Q3_K_L
// files) as Q6_K: the same 16-element sub-blocks and super-block scale, a 6-bit signed scale
// (s - 32) that Q6_K's int8 scale holds, codes in [-4, 3] that Q6_K's [-32, 31] holds. The
// rewritten tensor takes 210 bytes a 256-weight block instead of 110 (6.6 bits a weight instead
// of 3.4) and runs on every backend's Q6_K kernels, with the file's values bit for bit.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/dtype.h"

namespace hearth {

// The type a tensor of type t is rewritten to at load; nullopt when t is computed as it is (or
// not at all).
std::optional<DType> transcode_target(DType t);

// n_blocks blocks of type `from` -> n_blocks blocks of transcode_target(from) (each type's
// blocks hold the same number of weights).
void transcode(DType from, const void* src, void* dst, int64_t n_blocks);
// n_blocks Q3_K blocks -> n_blocks Q6_K blocks (dst: n_blocks * 210 bytes).
void transcode_q3_k_to_q6_k(const void* src, void* dst, int64_t n_blocks);

}  // namespace hearth
