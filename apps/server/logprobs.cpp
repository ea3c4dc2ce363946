// Log-softmax in double (32k-256k terms), a partial sort for the top tokens, and the JSON shapes.
#include "logprobs.h"

#include <algorithm>
#include <cmath>

namespace hearth::server {

using json = nlohmann::json;

TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t chosen, int top_n,
                           const Tokenizer& tokenizer) {
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - double(max));
  const double log_z = double(max) + std::log(sum);
  auto alternative = [&](int32_t id) {
    return TokenAlternative{id, tokenizer.token_bytes(id), float(double(logits[id]) - log_z)};
  };
  TokenLogprob out;
  out.chosen = alternative(chosen);
  const int n = std::clamp(top_n, 0, n_vocab);
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) ids[size_t(i)] = i;
    auto more_likely = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), more_likely);
    for (int k = 0; k < n; ++k) out.top.push_back(alternative(ids[size_t(k)]));
  }
  return out;
}

namespace {

json byte_values(const std::string& s) {
  json b = json::array();
  for (char c : s) b.push_back(int(static_cast<unsigned char>(c)));
  return b;
}

// The token's text; bytes that are not UTF-8 on their own become U+FFFD when serialized, and
// `bytes` keeps the exact values (OpenAI's reason for the field).
json alternative_json(const TokenAlternative& a) {
  return json{{"token", a.bytes}, {"logprob", a.logprob}, {"bytes", byte_values(a.bytes)}};
}

}  // namespace

json chat_logprobs_json(const std::vector<TokenLogprob>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    json entry = alternative_json(t.chosen);
    json top = json::array();
    for (const auto& a : t.top) top.push_back(alternative_json(a));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs_json(const std::vector<TokenLogprob>& tokens, size_t* text_offset) {
  json text = json::array(), logprob = json::array(), top = json::array(), offset = json::array();
  for (const auto& t : tokens) {
    text.push_back(t.chosen.bytes);
    logprob.push_back(t.chosen.logprob);
    json alternatives = json::object();
    for (const auto& a : t.top) alternatives[a.bytes] = a.logprob;
    top.push_back(std::move(alternatives));
    offset.push_back(*text_offset);
    *text_offset += t.chosen.bytes.size();
  }
  return json{{"tokens", std::move(text)},
              {"token_logprobs", std::move(logprob)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offset)}};
}

}  // namespace hearth::server
