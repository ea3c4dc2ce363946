// Reads a golden directory's reference outputs (golden.safetensors from HF transformers) and
// compares logits: relative error per row and KL divergence of softmax distributions.
#pragma once

#include <string>
#include <vector>

namespace hearth::test {

struct Golden {
  std::vector<int32_t> input_ids;
  std::vector<float> logits;  // [T, n_vocab]
  int64_t n_vocab = 0;
  std::vector<int32_t> gen_prompt;
  std::vector<int32_t> gen_ids;
};

Golden load_golden(const std::string& dir);  // throws on a missing/bad file (test fails)

// max over rows of ||a_row - b_row|| / ||b_row||
double max_row_relative_error(const std::vector<float>& a, const std::vector<float>& ref,
                              int64_t n_vocab);
// mean over rows of KL(softmax(ref) || softmax(a))
double mean_kl_divergence(const std::vector<float>& a, const std::vector<float>& ref,
                          int64_t n_vocab);
// fraction of rows whose argmax agrees
double top1_agreement(const std::vector<float>& a, const std::vector<float>& ref, int64_t n_vocab);

}  // namespace hearth::test
