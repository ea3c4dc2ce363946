// The plain greedy loop Model::decode_greedy must reproduce, for its CPU and CUDA tests: a
// prompt's prefill with its argmax, then decode + host argmax step by step. Header-only so only
// tests that link the model include it.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace hearth::test {

// A fresh cache of `capacity` in kv, the prompt prefilled, and the argmax of its last logits.
inline int32_t prefill_and_pick(const Model& m, const std::vector<int32_t>& prompt,
                                int64_t capacity, KvCache& kv, ForwardScratch& scratch) {
  auto made = m.new_kv_cache(capacity);
  EXPECT_TRUE(made.is_ok()) << made.message();
  kv = std::move(made).value();
  std::vector<float> logits;
  EXPECT_TRUE(m.prefill(kv, prompt, scratch, &logits).is_ok());
  return greedy_argmax(logits.data(), m.hparams().n_vocab);
}

// n steps of decode + greedy_argmax on the host, starting by feeding `token`.
inline std::vector<int32_t> greedy_reference(const Model& m, KvCache& kv, ForwardScratch& scratch,
                                             int32_t token, int n) {
  std::vector<int32_t> out;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(m.decode(kv, token, scratch, &logits).is_ok());
    token = greedy_argmax(logits.data(), m.hparams().n_vocab);
    out.push_back(token);
  }
  return out;
}

}  // namespace hearth::test
