// The mixture-of-experts FFN block: the layer's router, experts and biases handed to the
// backend's named op (Backend::moe_ffn: routing, per-expert gated FFNs, weighted sum), then the
// post-norm where the family has one and the residual add. With --cpu-moe the op runs on the
// CPU backend for a GPU layer: xn goes across and the sum comes back (a host round trip per
// layer, which is why such a layer's decode steps are not captured).
#include "model/moe.h"

#include <vector>

#include "model/model.h"

namespace hearth {

void Model::moe_block(int64_t l, ForwardScratch::Buffers& b, ForwardScratch::Buffers& experts,
                      Backend* be, int64_t T) const {
  const LayerWeights& w = layers_[size_t(l)];
  const int64_t E = hp_.n_embd;
  Backend* xb = expert_backends_[size_t(l)];
  const bool across = xb != be;
  ForwardScratch::Buffers& eb = across ? experts : b;
  std::vector<float> host;
  if (across) {
    host.resize(size_t(T * E));
    be->download(host.data(), b.xn, T * E);
    xb->upload(eb.xn, host.data(), T * E);
  }
  Backend::MoeBlock m;
  m.x = eb.xn;
  // Without a post-norm (and on one backend) the weighted sum goes straight into the residual.
  m.accumulate = !w.post_ffn_norm && !across;
  m.out = m.accumulate ? b.x : eb.moe_out;
  m.n_tokens = T, m.n_embd = E, m.n_ff = hp_.n_ff_exp;
  m.n_expert = hp_.n_expert, m.n_used = hp_.n_expert_used;
  m.renormalise = hp_.moe_norm_topk;
  m.router = &w.router;
  m.router_bias = w.router_bias;
  m.gate = w.exp_gate, m.up = w.exp_up, m.down = w.exp_down;
  m.gate_bias = w.exp_gate_bias, m.up_bias = w.exp_up_bias, m.down_bias = w.exp_down_bias;
  switch (hp_.activation) {
    case FfnActivation::kSilu:
      m.act = Backend::GatedAct::kSilu;
      break;
    case FfnActivation::kGeluTanh:
      m.act = Backend::GatedAct::kGeluTanh;
      break;
    case FfnActivation::kSwigluClamped:
      m.act = Backend::GatedAct::kSwigluClamped;
      break;
  }
  m.swiglu_alpha = hp_.swiglu_alpha, m.swiglu_limit = hp_.swiglu_limit;
  m.logits = eb.router;
  m.gate_rows = eb.gate, m.up_rows = eb.up, m.in_rows = eb.moe_in, m.out_rows = eb.moe_out;
  xb->moe_ffn(m);
  if (m.accumulate) return;
  if (across) {
    xb->download(host.data(), eb.moe_out, T * E);
    be->upload(b.moe_out, host.data(), T * E);
  }
  if (w.post_ffn_norm) be->rmsnorm(b.moe_out, w.post_ffn_norm, b.moe_out, T, E, hp_.rms_eps);
  be->add_inplace(b.x, b.moe_out, T * E);
}

}  // namespace hearth
