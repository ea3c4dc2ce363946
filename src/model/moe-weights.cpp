// An MoE layer's tensors: the router, the experts (GGUF's stacked tensors as per-expert views,
// HF's per-expert tensors, or gpt-oss's stacked HF layout converted into owned buffers) and,
// for families with them, the router's and the experts' biases.
#include <cstring>

#include "model/hf-stacked-experts.h"
#include "model/weight-source.h"

namespace hearth {

// Looks up a tensor and checks its shape and that Hearth can compute with its type.
Result<Weight> take_weight(const FindTensor& find, const std::string& name,
                           const std::vector<int64_t>& shape, bool required) {
  const TensorView* t = find(name);
  if (!t) {
    if (!required) return Weight{};
    return Status::error("missing tensor " + name);
  }
  if (t->shape != shape)
    return Status::error("tensor " + name + " has shape " + shape_string(t->shape) + ", expected " +
                         shape_string(shape));
  if (!dtype_info(t->dtype).runnable)
    return Status::error(std::string("unsupported tensor type ") + dtype_name(t->dtype) + " (" +
                         name + ")");
  Weight w;
  w.host = *t;
  return w;
}

namespace {

// An MoE layer's experts for one projection: 2-D views [rows, cols] of a stacked
// [n_expert, rows, cols] tensor (GGUF; no copy, each view named "<name>#e" for the weight
// cache), or each expert's own tensor (HF).
Status take_stacked_or_per_expert(const Source& src, int64_t l, TensorRole role, int64_t n_expert,
                                  int64_t rows, int64_t cols, std::vector<Weight>& out) {
  out.assign(size_t(n_expert), Weight{});
  const std::string stacked = src.name(role, l);
  if (const TensorView* whole = stacked.empty() ? nullptr : src.find(stacked)) {
    const std::vector<int64_t> want = {n_expert, rows, cols};
    if (whole->shape != want)
      return Status::error("tensor " + stacked + " has shape " + shape_string(whole->shape) +
                           ", expected " + shape_string(want) + " (expert_count experts)");
    if (!dtype_info(whole->dtype).runnable)
      return Status::error(std::string("unsupported tensor type ") + dtype_name(whole->dtype) +
                           " (" + stacked + ")");
    for (int64_t e = 0; e < n_expert; ++e) {
      TensorView v = *whole;
      v.name = stacked + "#" + std::to_string(e);
      v.shape = {rows, cols};
      v.data = whole->row(e * rows);
      v.nbytes = uint64_t(rows) * whole->row_stride_bytes();
      out[size_t(e)].host = v;
    }
    return Status::ok();
  }
  if (!src.expert) return Status::error("missing tensor " + stacked);
  for (int64_t e = 0; e < n_expert; ++e) {
    HEARTH_ASSIGN_OR_RETURN(out[size_t(e)],
                            take_weight(src.find, src.expert(role, l, e), {rows, cols}));
  }
  // An expert beyond the count would be silently ignored: say the count disagrees instead.
  if (src.find(src.expert(role, l, n_expert)))
    return Status::error("tensor " + src.expert(role, l, n_expert) +
                         " exists beyond the expert count " + std::to_string(n_expert));
  return Status::ok();
}

// A view of owned f32 values as a vector weight named `name`.
Weight owned_vector(std::vector<std::vector<uint8_t>>& owned, const std::vector<float>& v,
                    const std::string& name) {
  auto& bytes = owned.emplace_back(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  Weight w;
  w.host = {name, DType::F32, {int64_t(v.size())}, bytes.data(), bytes.size()};
  return w;
}

// GGUF's stacked expert biases [n_expert, n] as per-expert vector views (no copy).
Status take_stacked_biases(const Source& src, int64_t l, TensorRole role, int64_t n_expert,
                           int64_t n, std::vector<Weight>& out) {
  const std::string name = src.name(role, l);
  HEARTH_ASSIGN_OR_RETURN(Weight whole, take_weight(src.find, name, {n_expert, n}));
  if (dtype_info(whole.host.dtype).quantized)
    return Status::error("tensor " + name + " must be a float type");
  out.assign(size_t(n_expert), Weight{});
  for (int64_t e = 0; e < n_expert; ++e) {
    TensorView v = whole.host;
    v.name = name + "#" + std::to_string(e);
    v.shape = {n};
    v.data = whole.host.row(e);
    v.nbytes = whole.host.row_stride_bytes();
    out[size_t(e)].host = v;
  }
  return Status::ok();
}

// gpt-oss's HF layout (hf-stacked-experts.h): each expert's gate, up and down matrices and
// biases converted once into owned buffers, exact in the checkpoint's float dtype.
Status take_hf_stacked(const ArchSpec& arch, const HParams& hp, const Source& src, int64_t l,
                       LayerWeights& lw, std::vector<std::vector<uint8_t>>& owned) {
  const int64_t NE = hp.n_expert, E = hp.n_embd, F = hp.n_ff_exp;
  auto find = [&](TensorRole role, const std::vector<int64_t>& shape) -> Result<Weight> {
    return take_weight(src.find, src.expert(role, l, -1), shape);
  };
  HEARTH_ASSIGN_OR_RETURN(Weight gate_up, find(TensorRole::kFfnGateUpExps, {NE, E, 2 * F}));
  HEARTH_ASSIGN_OR_RETURN(Weight down, find(TensorRole::kFfnDownExps, {NE, F, E}));
  const StackedExpertPart parts[] = {StackedExpertPart::kGate, StackedExpertPart::kUp,
                                     StackedExpertPart::kDown};
  std::vector<Weight>* mats[] = {&lw.exp_gate, &lw.exp_up, &lw.exp_down};
  for (int i = 0; i < 3; ++i) {
    const TensorView& whole = parts[i] == StackedExpertPart::kDown ? down.host : gate_up.host;
    const std::vector<int64_t> shape = parts[i] == StackedExpertPart::kDown
                                           ? std::vector<int64_t>{E, F}
                                           : std::vector<int64_t>{F, E};
    mats[i]->assign(size_t(NE), Weight{});
    for (int64_t e = 0; e < NE; ++e) {
      auto& bytes = owned.emplace_back();
      HEARTH_TRY(stacked_expert_matrix(whole, e, parts[i], bytes));
      Weight& w = (*mats[i])[size_t(e)];
      w.host = {whole.name + "#" + std::to_string(i) + "." + std::to_string(e), whole.dtype, shape,
                bytes.data(), bytes.size()};
    }
  }
  if (!arch.moe_biases) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(Weight gate_up_bias, find(TensorRole::kFfnGateUpExpsBias, {NE, 2 * F}));
  HEARTH_ASSIGN_OR_RETURN(Weight down_bias, find(TensorRole::kFfnDownExpsBias, {NE, E}));
  std::vector<Weight>* biases[] = {&lw.exp_gate_bias_src, &lw.exp_up_bias_src,
                                   &lw.exp_down_bias_src};
  std::vector<float> v;
  for (int i = 0; i < 3; ++i) {
    const TensorView& whole =
        parts[i] == StackedExpertPart::kDown ? down_bias.host : gate_up_bias.host;
    biases[i]->assign(size_t(NE), Weight{});
    for (int64_t e = 0; e < NE; ++e) {
      HEARTH_TRY(stacked_expert_bias(whole, e, parts[i], v));
      (*biases[i])[size_t(e)] =
          owned_vector(owned, v, whole.name + "#" + std::to_string(i) + "." + std::to_string(e));
    }
  }
  return Status::ok();
}

}  // namespace

Status take_moe_layer(const ArchSpec& arch, const HParams& hp, const Source& src, int64_t l,
                      LayerWeights& lw, std::vector<std::vector<uint8_t>>& owned) {
  const int64_t NE = hp.n_expert, FE = hp.n_ff_exp, E = hp.n_embd;
  auto router = take_weight(src.find, src.name(TensorRole::kFfnGateInp, l), {NE, E});
  if (!router.is_ok())  // its rows are the experts: say which count it disagrees with
    return Status::error(router.message() + " (expert count " + std::to_string(NE) + ")");
  lw.router = router.value();
  const bool hf_stacked = src.expert && arch.hf_moe.stacked;
  if (hf_stacked) {
    HEARTH_TRY(take_hf_stacked(arch, hp, src, l, lw, owned));
  } else {
    HEARTH_TRY(
        take_stacked_or_per_expert(src, l, TensorRole::kFfnGateExps, NE, FE, E, lw.exp_gate));
    HEARTH_TRY(take_stacked_or_per_expert(src, l, TensorRole::kFfnUpExps, NE, FE, E, lw.exp_up));
    HEARTH_TRY(
        take_stacked_or_per_expert(src, l, TensorRole::kFfnDownExps, NE, E, FE, lw.exp_down));
  }
  if (!arch.moe_biases) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(lw.router_bias_src,
                          take_weight(src.find, src.name(TensorRole::kFfnGateInpBias, l), {NE}));
  if (hf_stacked) return Status::ok();  // take_hf_stacked took the experts' biases
  HEARTH_TRY(
      take_stacked_biases(src, l, TensorRole::kFfnGateExpsBias, NE, FE, lw.exp_gate_bias_src));
  HEARTH_TRY(take_stacked_biases(src, l, TensorRole::kFfnUpExpsBias, NE, FE, lw.exp_up_bias_src));
  HEARTH_TRY(
      take_stacked_biases(src, l, TensorRole::kFfnDownExpsBias, NE, E, lw.exp_down_bias_src));
  return Status::ok();
}

}  // namespace hearth
