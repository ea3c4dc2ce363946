// The JSON shapes of token logprobs.
#include "logprobs.h"

#include <algorithm>
#include <cmath>

namespace hearth::server {

using json = nlohmann::json;

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
