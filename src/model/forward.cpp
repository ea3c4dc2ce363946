// The ONE generic forward pass, walking the model's flat description (HParams): embed (x scale)
// -> N x [RMSNorm, attention block (Q/K/V, bias, per-head norm, RoPE, KV append, attention with
// window / soft-cap), output projection (+ post-norm), residual, RMSNorm, FFN block (gated
// SiLU / GELU, or a mixture of experts: model/moe.cpp), down projection (+ post-norm),
// residual] -> RMSNorm -> LM head (soft-cap).
// Written against the Backend interface; a block a family does not use costs one branch per
// layer, never an op. Layer groups on different backends exchange activations once per group.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/model.h"

namespace hearth {

namespace {

void free_buffers(ForwardScratch::Buffers& b) {
  for (float* p :
       {b.x, b.xn, b.q, b.k, b.v, b.attn, b.gate, b.up, b.logits, b.router, b.moe_in, b.moe_out})
    if (p) b.backend->free(p);
  b = {};
}

}  // namespace

ForwardScratch::~ForwardScratch() {
  for (auto& b : per_backend) free_buffers(b);
  free_buffers(experts);
}

Status Model::prepare_scratch(ForwardScratch& s, int64_t n_tokens) const {
  if (s.per_backend.size() != groups_.size()) {
    s.per_backend.clear();
    s.per_backend.resize(groups_.size());
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& b = s.per_backend[g];
    if (b.backend == groups_[g].backend && b.capacity_tokens >= n_tokens) continue;
    free_buffers(b);
    Backend* be = groups_[g].backend;
    b.backend = be;
    b.capacity_tokens = n_tokens;
    const int64_t T = n_tokens;
    b.x = be->alloc(T * hp_.n_embd);
    b.xn = be->alloc(T * hp_.n_embd);
    b.q = be->alloc(T * hp_.q_dim());
    b.k = be->alloc(T * hp_.kv_dim());
    b.v = be->alloc(T * hp_.kv_dim());
    b.attn = be->alloc(T * hp_.q_dim());
    const int64_t ff = std::max(hp_.n_ff, hp_.n_ff_exp);
    b.gate = be->alloc(T * ff);
    b.up = be->alloc(T * ff);
    if (hp_.n_expert > 0) {
      b.router = be->alloc(T * hp_.n_expert);
      b.moe_in = be->alloc(T * hp_.n_embd);
      b.moe_out = be->alloc(T * hp_.n_embd);
    }
    if (g + 1 == groups_.size()) b.logits = be->alloc(T * hp_.n_vocab);
  }
  // --cpu-moe: the expert backend's side of the layers whose experts run off their group's.
  Backend* xb = nullptr;
  for (const auto& g : groups_)
    for (int64_t l = g.first; l < g.last; ++l)
      if (hp_.is_moe_layer(l) && expert_backends_[size_t(l)] != g.backend)
        xb = expert_backends_[size_t(l)];
  auto& e = s.experts;
  if (xb && (e.backend != xb || e.capacity_tokens < n_tokens)) {
    free_buffers(e);
    const int64_t T = n_tokens;
    e.backend = xb;
    e.capacity_tokens = T;
    e.xn = xb->alloc(T * hp_.n_embd);
    e.router = xb->alloc(T * hp_.n_expert);
    e.gate = xb->alloc(T * hp_.n_ff_exp);
    e.up = xb->alloc(T * hp_.n_ff_exp);
    e.moe_in = xb->alloc(T * hp_.n_embd);
    e.moe_out = xb->alloc(T * hp_.n_embd);
  }
  return Status::ok();
}

void Model::tap(const std::string& name, Backend* b, const float* data, int64_t n) const {
  if (!debug_tap) return;
  std::vector<float> host(static_cast<size_t>(n));
  b->download(host.data(), data, n);
  debug_tap(name, host.data(), n);
}

Status Model::forward(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segs,
                      ForwardScratch& scratch, std::vector<float>* logits) const {
  return run(tokens, segs, scratch, logits, false);
}

Status Model::forward_picks(const std::vector<int32_t>& tokens,
                            const std::vector<BatchSegment>& segs, ForwardScratch& scratch,
                            std::span<const uint8_t> want_logits,
                            std::span<const Backend::RowDraw> draws, std::vector<float>* logits,
                            std::vector<int32_t>* ids) const {
  if (!logits || !ids) return Status::error("forward_picks: no output");
  for (const Backend::RowDraw& d : draws)
    if (!head_backend()->can_draw_rows(d.rule))
      return Status::error("forward_picks: the " + head_backend()->name() +
                           " backend cannot draw by this rule");
  const RowPicks picks{want_logits, draws, ids};
  return run(tokens, segs, scratch, logits, false, &picks);
}

Status Model::forward_hidden(const std::vector<int32_t>& tokens,
                             const std::vector<BatchSegment>& segs, ForwardScratch& scratch,
                             std::vector<float>* hidden) const {
  return run(tokens, segs, scratch, hidden, true);
}

Status Model::run(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segs,
                  ForwardScratch& scratch, std::vector<float>* out, bool hidden,
                  const RowPicks* picks) const {
  int64_t T = 0;
  for (const auto& s : segs) {
    if (!s.kv || s.n_tokens <= 0) return Status::error("forward: empty batch segment");
    if (s.pos0 + s.n_tokens > s.kv->capacity())
      return Status::error("context is full: " + std::to_string(s.pos0 + s.n_tokens) +
                           " positions needed, the context holds " +
                           std::to_string(s.kv->capacity()));
    T += s.n_tokens;
  }
  if (T != int64_t(tokens.size())) return Status::error("forward: token count mismatch");
  if (T > kMaxTokensPerPass) return Status::error("forward: batch larger than one pass");
  for (int32_t id : tokens)
    if (id < 0 || id >= hp_.n_vocab)
      return Status::error("token id " + std::to_string(id) + " is out of range (vocabulary has " +
                           std::to_string(hp_.n_vocab) + " tokens)");
  // Pooled caches commit the blocks this pass writes now, before any op is queued or recorded.
  for (const auto& s : segs) HEARTH_TRY(s.kv->ensure(s.pos0 + s.n_tokens));
  int64_t n_out = 0;
  for (const auto& s : segs) n_out += s.all_logits ? s.n_tokens : 1;
  if (picks && int64_t(picks->want_logits.size()) != n_out)
    return Status::error("forward: " + std::to_string(picks->want_logits.size()) +
                         " logits flags for " + std::to_string(n_out) + " output rows");
  if (picks)
    for (const Backend::RowDraw& d : picks->draws)
      if (d.row < 0 || d.row >= n_out)
        return Status::error("forward: a draw for row " + std::to_string(d.row) + " of " +
                             std::to_string(n_out));
  // A decode step of several sequences with every layer on one backend: the backend may run it
  // as lanes, and hears what each such step cost (Backend::decode_lanes).
  if (groups_.size() == 1 && !hidden && !debug_tap && T == int64_t(segs.size()) && T > 1) {
    Backend* be = groups_[0].backend;
    const int lanes = be->decode_lanes(T);
    const auto start = std::chrono::steady_clock::now();
    const Status st = lanes > 1 ? run_lanes(lanes, tokens, segs, scratch, out, picks)
                                : run_pass(tokens, segs, scratch, out, hidden, picks);
    be->decode_step_took(
        T, lanes, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return st;
  }
  return run_pass(tokens, segs, scratch, out, hidden, picks);
}

Status Model::run_pass(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segs,
                       ForwardScratch& scratch, std::vector<float>* out, bool hidden,
                       const RowPicks* picks) const {
  const int64_t T = int64_t(tokens.size());
  HEARTH_TRY(prepare_scratch(scratch, T));

  Pass pass{tokens, segs, {}, T, 0, hidden};
  pass.pos.resize(static_cast<size_t>(T));
  {
    size_t t = 0;
    for (const auto& s : segs)
      for (int64_t i = 0; i < s.n_tokens; ++i) pass.pos[t++] = int32_t(s.pos0 + i);
  }
  for (const auto& s : segs) pass.n_out += s.all_logits ? s.n_tokens : 1;

  // A lone decode step may be captured and replayed by the backend (CUDA graphs): same buffers,
  // new token and position. Debug taps read back mid-step, so they force eager execution.
  const bool step = T == 1 && segs.size() == 1 && !debug_tap && !hidden;
  std::vector<float> host_x;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Backend* be = groups_[g].backend;
    if (g > 0) {  // hand the residual stream to the next group's backend
      const int64_t E = hp_.n_embd;
      host_x.resize(size_t(T * E));
      groups_[g - 1].backend->download(host_x.data(), scratch.per_backend[g - 1].x, T * E);
      be->upload(scratch.per_backend[g].x, host_x.data(), T * E);
    }
    if (step) {
      HEARTH_TRY(groups_[g].decode_loop->step(step_key(g, scratch, *segs[0].kv), tokens[0],
                                              segs[0].pos0, segs[0].kv->capacity(),
                                              [&] { run_group(g, pass, scratch); }));
    } else {
      run_group(g, pass, scratch);
    }
    HEARTH_TRY(be->status());
  }
  for (const auto& s : segs) s.kv->set_used(std::max(s.kv->used(), s.pos0 + s.n_tokens));
  if (picks) {
    Backend* last = groups_.back().backend;
    picks->ids->resize(size_t(pass.n_out));
    out->resize(size_t(pass.n_out * hp_.n_vocab));  // (rows not wanted keep what they held)
    pick_rows_of(last, scratch.per_backend.back().logits, 0, pass.n_out, *picks, out->data());
    return last->status();
  }
  if (out) {
    Backend* last = groups_.back().backend;
    auto& b = scratch.per_backend.back();
    const int64_t width = hidden ? hp_.n_embd : hp_.n_vocab;
    const size_t old = out->size();
    out->resize(old + size_t(pass.n_out * width));
    last->download(out->data() + old, hidden ? b.xn : b.logits, pass.n_out * width);
  }
  return Status::ok();
}

void Model::pick_rows_of(Backend* be, const float* rows, int64_t r0, int64_t n,
                         const RowPicks& picks, float* logits) const {
  const int64_t V = hp_.n_vocab;
  thread_local std::vector<Backend::RowDraw> draws;  // the draws of these rows, from row 0
  draws.clear();
  for (Backend::RowDraw d : picks.draws)
    if (d.row >= r0 && d.row < r0 + n) {
      d.row -= r0;
      draws.push_back(d);
    }
  be->pick_rows(rows, n, V, draws, picks.ids->data() + r0);
  for (int64_t r = 0; r < n;) {  // runs of wanted rows, one download each
    if (!picks.want_logits[size_t(r0 + r)]) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < n && picks.want_logits[size_t(r0 + end)]) ++end;
    be->download(logits + (r0 + r) * V, rows + r * V, (end - r) * V);
    r = end;
  }
}

DecodeStepKey Model::step_key(size_t g, const ForwardScratch& scratch, KvCache& kv) const {
  return {scratch.per_backend[g].x, scratch.per_backend[g].capacity_tokens,
          kv.k_data(groups_[g].first)};
}

void Model::run_group(size_t g, const Pass& p, ForwardScratch& scratch) const {
  const int64_t T = p.n_tokens;
  const int64_t E = hp_.n_embd;
  Backend* be = groups_[g].backend;
  auto& b = scratch.per_backend[g];
  const bool decode = std::all_of(p.segs.begin(), p.segs.end(),
                                  [](const BatchSegment& s) { return s.n_tokens == 1; });
  be->begin_pass(!decode             ? Backend::Phase::kPrefill
                 : p.segs.size() > 1 ? Backend::Phase::kDecodeBatch
                                     : Backend::Phase::kDecode,
                 T);
  if (g == 0) {
    be->embed(tok_embd_, p.tokens.data(), T, b.x);
    if (hp_.embed_scale > 0) be->scale(b.x, T * E, hp_.embed_scale);
    tap("token_embd", be, b.x, T * E);
  }
  // A sandwich layer's last step also norms x for the next layer of the group (post_norm_add).
  bool normed = false;
  for (int64_t l = groups_[g].first; l < groups_[g].last; ++l) {
    const float* next_norm = l + 1 < groups_[g].last ? layers_[size_t(l + 1)].attn_norm : nullptr;
    normed = run_layer(l, p, b, scratch.experts, be, normed, next_norm);
  }
  if (g + 1 != groups_.size()) return;
  // LM head only on the rows whose logits are wanted: gather them to the front first.
  int64_t n_out = 0, row = 0;
  for (const auto& s : p.segs) {
    const int64_t take = s.all_logits ? s.n_tokens : 1;
    const int64_t from = row + s.n_tokens - take;
    if (from != n_out) be->copy(b.x + n_out * E, b.x + from * E, take * E);
    n_out += take;
    row += s.n_tokens;
  }
  be->rmsnorm(b.x, output_norm_, b.xn, n_out, E, hp_.rms_eps);
  if (p.hidden) return;
  be->matmul(output_, b.xn, n_out, b.logits);
  if (hp_.final_softcap > 0) be->softcap(b.logits, n_out * hp_.n_vocab, hp_.final_softcap);
}

bool Model::run_layer(int64_t l, const Pass& p, ForwardScratch::Buffers& b,
                      ForwardScratch::Buffers& experts, Backend* be, bool attn_normed,
                      const float* next_attn_norm) const {
  const int64_t T = p.n_tokens, E = hp_.n_embd;
  const LayerWeights& w = layers_[size_t(l)];
  if (!attn_normed) be->rmsnorm(b.x, w.attn_norm, b.xn, T, E, hp_.rms_eps);
  attention_block(l, p, b, be);
  if (debug_tap) tap("blk." + std::to_string(l) + ".attn_out", be, b.attn, T * hp_.q_dim());
  // (gpt-oss adds its O bias after the projection: its FFN norm cannot ride along; a MoE
  // layer's experts read the normed rows as floats, which matmul_add_norm may not write)
  const bool ffn_normed = add_block_output(
      w.wo, b.attn, w.post_attn_norm,
      w.o_bias || (!w.post_attn_norm && hp_.is_moe_layer(l)) ? nullptr : w.ffn_norm, b, be, T);
  if (w.o_bias) be->add_bias(b.x, w.o_bias, T, E);  // x += W_o attn + b_o (gpt-oss)
  if (!ffn_normed) be->rmsnorm(b.x, w.ffn_norm, b.xn, T, E, hp_.rms_eps);
  bool normed = false;
  if (hp_.is_moe_layer(l)) {
    moe_block(l, b, experts, be, T);
  } else {
    ffn_block(l, b, be, T);
    normed = add_block_output(w.w_down, b.gate, w.post_ffn_norm, next_attn_norm, b, be, T);
  }
  if (debug_tap) tap("blk." + std::to_string(l) + ".out", be, b.x, T * E);
  return normed;
}

void Model::attention_block(int64_t l, const Pass& p, ForwardScratch::Buffers& b,
                            Backend* be) const {
  const int64_t T = p.n_tokens;
  const int64_t HD = hp_.head_dim, QD = hp_.q_dim(), KVD = hp_.kv_dim();
  const LayerWeights& w = layers_[size_t(l)];
  const LayerAttention& kind = hp_.layers[size_t(l)];
  const Backend::MatmulOut qkv[] = {{&w.wq, b.q}, {&w.wk, b.k}, {&w.wv, b.v}};
  be->matmul_shared(b.xn, T, qkv);
  if (w.q_bias) be->add_bias(b.q, w.q_bias, T, QD);
  if (w.k_bias) be->add_bias(b.k, w.k_bias, T, KVD);
  if (w.v_bias) be->add_bias(b.v, w.v_bias, T, KVD);
  const RopeTable& rope = rope_[size_t(kind.rope)];
  Backend::AttentionBlock a;
  a.q = b.q, a.k = b.k, a.v = b.v, a.out = b.attn;
  a.n_heads = hp_.n_head, a.n_kv_heads = hp_.n_head_kv, a.head_dim = HD;
  a.scale = hp_.query_scale;
  a.rope = {rope.inv_freq.data(), rope_style_, hp_.n_rot, rope.mscale, rope_partial_};
  a.window = kind.window;
  a.softcap = hp_.attn_softcap;
  a.sinks = w.sinks;                         // gpt-oss: per-head logits in the softmax denominator
  a.q_norm = w.q_norm, a.k_norm = w.k_norm;  // per-head RMSNorm before RoPE (Qwen3, Gemma 3)
  a.norm_eps = hp_.rms_eps;
  std::vector<Backend::KvSegment> segs;
  segs.reserve(p.segs.size());
  for (const auto& s : p.segs)
    segs.push_back({s.kv->k_data(l), s.kv->k(l).type, s.kv->v_data(l), s.kv->v(l).type, s.pos0,
                    s.n_tokens, s.kv->ring_rows(l)});
  // The rows go in runs: consecutive one-token segments (the decode rows of several sequences)
  // as one batch op, each longer segment (a prompt chunk) as a block of its own. A served step
  // that carries prompt chunks among 32 decoding streams then attends the streams in a few
  // launches, not a chain of launches per stream (H200: ~3,000 launches a step). LongRoPE picks
  // its table by each sequence's cache size: a run holds one table's sequences.
  const auto long_table = [&](size_t s) {
    return !rope.inv_freq_long.empty() && p.segs[s].kv->capacity() > rope.long_beyond;
  };
  int64_t row = 0;
  for (size_t i = 0; i < segs.size();) {
    size_t n = 1;
    if (segs[i].n_tokens == 1)
      while (i + n < segs.size() && segs[i + n].n_tokens == 1 && long_table(i + n) == long_table(i))
        ++n;
    Backend::AttentionBlock part = a;
    part.q += row * QD, part.k += row * KVD, part.v += row * KVD, part.out += row * QD;
    part.host_pos = p.pos.data() + row;
    part.segments = std::span<const Backend::KvSegment>(segs.data() + i, n);
    part.n_tokens = 0;
    for (const auto& s : part.segments) part.n_tokens += s.n_tokens;
    if (long_table(i))
      part.rope.inv_freq = rope.inv_freq_long.data(), part.rope.mscale = rope.mscale_long;
    if (n > 1)
      be->rope_append_attend_batch(part);
    else
      be->rope_append_attend(part);
    row += part.n_tokens;
    i += n;
  }
  if (debug_tap) {  // (names are built only when someone listens: decode runs this per layer)
    // q and k hold their rotated rows here: only a decode step run as one captured graph keeps
    // the rotation inside its attention kernel, and taps make every step eager.
    const std::string blk = "blk." + std::to_string(l) + ".";
    tap(blk + "q", be, b.q, T * QD);
    tap(blk + "k", be, b.k, T * KVD);
  }
}

void Model::ffn_block(int64_t l, ForwardScratch::Buffers& b, Backend* be, int64_t T) const {
  const LayerWeights& w = layers_[size_t(l)];
  Backend::GatedFfn f{&w.w_gate, &w.w_up};
  switch (hp_.activation) {
    case FfnActivation::kGeluTanh:
      f.act = kernels::GatedAct::kGeluTanh;
      break;
    case FfnActivation::kSwigluClamped:
      f.act = kernels::GatedAct::kSwigluClamped;
      f.alpha = hp_.swiglu_alpha, f.limit = hp_.swiglu_limit;
      break;
    case FfnActivation::kSilu:
      f.act = kernels::GatedAct::kSilu;
      break;
  }
  be->matmul_gated(b.xn, T, f, b.gate, b.up);
}

bool Model::add_block_output(const Weight& proj, const float* in, const float* post_norm,
                             const float* next_norm, ForwardScratch::Buffers& b, Backend* be,
                             int64_t T) const {
  if (!post_norm && !next_norm) {
    be->matmul_add(proj, in, T, b.x, b.xn);  // b.xn: scratch
    return false;
  }
  if (!post_norm) {  // x += proj . in, then the next block's norm of x into xn
    be->matmul_add_norm(proj, in, T, b.x, b.xn, next_norm, hp_.rms_eps, b.xn);
    return true;
  }
  // Sandwich: x += norm(proj . in), and the next block's norm of x into xn, as one op.
  be->matmul(proj, in, T, b.xn);
  be->post_norm_add(b.xn, post_norm, b.x, T, hp_.n_embd, hp_.rms_eps, next_norm, b.xn);
  return next_norm != nullptr;
}

Status Model::prefill(KvCache& kv, const std::vector<int32_t>& tokens, ForwardScratch& scratch,
                      std::vector<float>* logits, bool all_logits) const {
  if (tokens.empty()) return Status::error("prefill: no tokens");
  if (logits) logits->clear();
  for (size_t begin = 0; begin < tokens.size(); begin += kMaxTokensPerPass) {
    const size_t end = std::min(tokens.size(), begin + size_t(kMaxTokensPerPass));
    const bool last_chunk = end == tokens.size();
    std::vector<int32_t> chunk(tokens.begin() + long(begin), tokens.begin() + long(end));
    BatchSegment seg{&kv, kv.used(), int64_t(chunk.size()), all_logits};
    HEARTH_TRY(forward(chunk, {seg}, scratch, (all_logits || last_chunk) ? logits : nullptr));
  }
  return Status::ok();
}

Status Model::decode(KvCache& kv, int32_t token, ForwardScratch& scratch,
                     std::vector<float>* logits) const {
  if (logits) logits->clear();
  BatchSegment seg{&kv, kv.used(), 1, false};
  return forward({token}, {seg}, scratch, logits);
}

}  // namespace hearth
