// The name table behind gguf_tensor_name / hf_tensor_name.
#include "model/tensor-names.h"

namespace hearth {

namespace {
struct Names {
  TensorRole role;
  const char* gguf;  // per-layer names get "blk.N." prefixed
  const char* hf;    // per-layer names get "model.layers.N." prefixed
  bool per_layer;
};
constexpr Names kNames[] = {
    {TensorRole::kTokenEmbedding, "token_embd.weight", "model.embed_tokens.weight", false},
    {TensorRole::kOutputNorm, "output_norm.weight", "model.norm.weight", false},
    {TensorRole::kOutput, "output.weight", "lm_head.weight", false},
    {TensorRole::kRopeFreqs, "rope_freqs.weight", "", false},
    {TensorRole::kRopeFactorsLong, "rope_factors_long.weight", "", false},
    {TensorRole::kRopeFactorsShort, "rope_factors_short.weight", "", false},
    {TensorRole::kAttnNorm, "attn_norm.weight", "input_layernorm.weight", true},
    {TensorRole::kAttnQ, "attn_q.weight", "self_attn.q_proj.weight", true},
    {TensorRole::kAttnK, "attn_k.weight", "self_attn.k_proj.weight", true},
    {TensorRole::kAttnV, "attn_v.weight", "self_attn.v_proj.weight", true},
    {TensorRole::kAttnQkv, "attn_qkv.weight", "self_attn.qkv_proj.weight", true},
    {TensorRole::kAttnOut, "attn_output.weight", "self_attn.o_proj.weight", true},
    {TensorRole::kAttnQBias, "attn_q.bias", "self_attn.q_proj.bias", true},
    {TensorRole::kAttnKBias, "attn_k.bias", "self_attn.k_proj.bias", true},
    {TensorRole::kAttnVBias, "attn_v.bias", "self_attn.v_proj.bias", true},
    {TensorRole::kAttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", true},
    {TensorRole::kAttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", true},
    {TensorRole::kAttnPostNorm, "post_attention_norm.weight", "post_attention_layernorm.weight",
     true},
    {TensorRole::kFfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", true},
    {TensorRole::kFfnGate, "ffn_gate.weight", "mlp.gate_proj.weight", true},
    {TensorRole::kFfnUp, "ffn_up.weight", "mlp.up_proj.weight", true},
    {TensorRole::kFfnGateUp, "ffn_up.weight", "mlp.gate_up_proj.weight", true},
    {TensorRole::kFfnDown, "ffn_down.weight", "mlp.down_proj.weight", true},
    {TensorRole::kFfnPostNorm, "post_ffw_norm.weight", "post_feedforward_layernorm.weight", true},
    {TensorRole::kFfnGateInp, "ffn_gate_inp.weight", "", true},
    {TensorRole::kFfnGateExps, "ffn_gate_exps.weight", "", true},
    {TensorRole::kFfnUpExps, "ffn_up_exps.weight", "", true},
    {TensorRole::kFfnDownExps, "ffn_down_exps.weight", "", true},
    {TensorRole::kAttnOutBias, "attn_output.bias", "self_attn.o_proj.bias", true},
    {TensorRole::kAttnSinks, "attn_sinks.weight", "self_attn.sinks", true},
    {TensorRole::kFfnGateInpBias, "ffn_gate_inp.bias", "", true},
    {TensorRole::kFfnGateExpsBias, "ffn_gate_exps.bias", "", true},
    {TensorRole::kFfnUpExpsBias, "ffn_up_exps.bias", "", true},
    {TensorRole::kFfnDownExpsBias, "ffn_down_exps.bias", "", true},
    {TensorRole::kFfnGateUpExps, "", "", true},
    {TensorRole::kFfnGateUpExpsBias, "", "", true},
};

const Names& lookup(TensorRole role) {
  for (const auto& n : kNames)
    if (n.role == role) return n;
  return kNames[0];
}
}  // namespace

std::string gguf_tensor_name(TensorRole role, int64_t layer) {
  const Names& n = lookup(role);
  return n.per_layer ? "blk." + std::to_string(layer) + "." + n.gguf : n.gguf;
}

std::string gguf_tensor_name(const ArchSpec& arch, TensorRole role, int64_t layer) {
  if (role == TensorRole::kFfnNorm && *arch.gguf_ffn_norm)
    return "blk." + std::to_string(layer) + "." + arch.gguf_ffn_norm;
  return gguf_tensor_name(role, layer);
}

std::string hf_tensor_name(TensorRole role, int64_t layer, NormPlacement norms) {
  const Names& n = lookup(role);
  const char* hf = n.hf;
  // Sandwich families: the FFN's pre-norm has its own name; post_attention_layernorm is the
  // post-attention norm (the table's entry above).
  if (norms == NormPlacement::kSandwich && role == TensorRole::kFfnNorm)
    hf = "pre_feedforward_layernorm.weight";
  if (norms == NormPlacement::kPre &&
      (role == TensorRole::kAttnPostNorm || role == TensorRole::kFfnPostNorm))
    return "";
  if (!*hf) return "";
  return n.per_layer ? "model.layers." + std::to_string(layer) + "." + hf : hf;
}

std::string hf_moe_tensor_name(const ArchSpec& arch, TensorRole role, int64_t layer,
                               int64_t expert) {
  const HfMoeNames& n = arch.hf_moe;
  if (!*n.block) return "";
  const std::string block = "model.layers." + std::to_string(layer) + "." + n.block + ".";
  if (n.stacked) {
    switch (role) {
      case TensorRole::kFfnGateInp:
        return block + n.router + ".weight";
      case TensorRole::kFfnGateInpBias:
        return block + n.router + ".bias";
      case TensorRole::kFfnGateUpExps:
        return block + "experts.gate_up_proj";
      case TensorRole::kFfnGateUpExpsBias:
        return block + "experts.gate_up_proj_bias";
      case TensorRole::kFfnDownExps:
        return block + "experts.down_proj";
      case TensorRole::kFfnDownExpsBias:
        return block + "experts.down_proj_bias";
      default:
        return "";
    }
  }
  const std::string ex = block + "experts." + std::to_string(expert) + ".";
  switch (role) {
    case TensorRole::kFfnGateInp:
      return block + n.router + ".weight";
    case TensorRole::kFfnGateExps:
      return ex + n.gate + ".weight";
    case TensorRole::kFfnUpExps:
      return ex + n.up + ".weight";
    case TensorRole::kFfnDownExps:
      return ex + n.down + ".weight";
    default:
      return "";
  }
}

bool is_norm_role(TensorRole role) {
  switch (role) {
    case TensorRole::kOutputNorm:
    case TensorRole::kAttnNorm:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kAttnPostNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kFfnPostNorm:
      return true;
    default:
      return false;
  }
}

}  // namespace hearth
