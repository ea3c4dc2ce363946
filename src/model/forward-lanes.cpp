// A decode step run as lanes (Backend::decode_lanes): the sequences cut into contiguous groups,
// each group's whole forward pass on one of the backend's threads with its own scratch, and the
// output rows gathered in segment order afterwards. Every row's result is the one a pass of its
// group alone gives; only the grouping of rows into matmul tiles differs from one pass of all.
#include <algorithm>

#include "model/model.h"

namespace hearth {

Status Model::run_lanes(int lanes, const std::vector<int32_t>& tokens,
                        const std::vector<BatchSegment>& segs, ForwardScratch& scratch,
                        std::vector<float>* out, const RowPicks* picks) const {
  const int64_t n = int64_t(segs.size()), V = hp_.n_vocab;
  Backend* be = groups_[0].backend;
  while (int64_t(scratch.lanes.size()) < lanes)
    scratch.lanes.push_back(std::make_unique<ForwardScratch>());
  // Lane i holds sequences [first(i), first(i + 1)).
  const auto first = [&](int i) { return n * i / lanes; };
  std::vector<std::vector<int32_t>> lane_tokens(static_cast<size_t>(lanes));
  std::vector<std::vector<BatchSegment>> lane_segs(static_cast<size_t>(lanes));
  for (int i = 0; i < lanes; ++i) {
    lane_tokens[size_t(i)].assign(tokens.begin() + first(i), tokens.begin() + first(i + 1));
    lane_segs[size_t(i)].assign(segs.begin() + first(i), segs.begin() + first(i + 1));
    HEARTH_TRY(prepare_scratch(*scratch.lanes[size_t(i)], first(i + 1) - first(i)));
  }
  be->run_lanes(lanes, [&](int i) {
    const auto& ls = lane_segs[size_t(i)];
    Pass pass{lane_tokens[size_t(i)], ls, {}, int64_t(ls.size()), int64_t(ls.size()), false};
    for (const BatchSegment& s : ls) pass.pos.push_back(int32_t(s.pos0));
    run_group(0, pass, *scratch.lanes[size_t(i)]);
  });
  HEARTH_TRY(be->status());
  for (const auto& s : segs) s.kv->set_used(std::max(s.kv->used(), s.pos0 + 1));

  if (picks) {  // (run() checked the draws' rows)
    picks->ids->resize(size_t(n));
    out->resize(size_t(n * V));  // (rows not wanted keep what they held)
  } else if (out) {
    out->resize(out->size() + size_t(n * V));
  }
  float* dst = out ? out->data() + (out->size() - size_t(n * V)) : nullptr;
  for (int i = 0; i < lanes; ++i) {
    const int64_t r0 = first(i), rows = first(i + 1) - r0;
    const float* logits = scratch.lanes[size_t(i)]->per_backend[0].logits;
    if (picks)
      pick_rows_of(be, logits, r0, rows, *picks, dst);
    else if (dst)
      be->download(dst + r0 * V, logits, rows * V);
  }
  return be->status();
}

}  // namespace hearth
