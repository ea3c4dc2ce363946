// Writes the fuzz seed corpus (small GGUF and safetensors files made by Hearth's own writers,
// HTTP requests, chat templates, grammars and schemas, tokenizer data) into
// OUT/seeds/{gguf,safetensors,http,jinja,grammar,tokenizer}, and empty work dirs
// OUT/corpus/{...} for libFuzzer's new inputs. Usage: make-seeds OUT. A new seed: one more
// put_*() call or list entry below.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "runtime/chat/chat-template.h"

namespace {

using namespace hearth;

bool put(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return bool(out);
}

std::vector<uint8_t> ramp(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(start + i);
  return v;
}

bool gguf_seeds(const std::string& dir) {
  bool ok = true;
  GgufWriter empty;
  ok &= put(dir + "/empty.gguf", empty.to_bytes());

  GgufWriter kv;
  kv.set_string("general.architecture", "llama");
  kv.set_u32("llama.block_count", 2);
  kv.set_i32("i32", -5);
  kv.set_u64("u64", 1ull << 40);
  kv.set_f32("llama.rope.freq_base", 10000.0f);
  kv.set_bool("tokenizer.ggml.add_bos_token", true);
  kv.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b"});
  kv.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2});
  kv.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  GgufValue nested;
  nested.type = GgufType::ARRAY;
  nested.elem_type = GgufType::ARRAY;
  nested.items.resize(2);
  for (auto& it : nested.items) {
    it.type = GgufType::ARRAY;
    it.elem_type = GgufType::UINT16;
    it.ints = {1, 2, 3};
  }
  kv.set_value("nested", nested);
  ok &= put(dir + "/metadata.gguf", kv.to_bytes());

  GgufWriter t = kv;
  t.add_tensor("token_embd.weight", DType::F32, {5, 4}, ramp(80, 1));
  t.add_tensor("blk.0.attn_q.weight", DType::Q8_0, {2, 32}, ramp(68, 7));
  t.add_tensor("output_norm.weight", DType::BF16, {4}, ramp(8, 9));
  ok &= put(dir + "/tensors.gguf", t.to_bytes());

  GgufWriter a;
  a.set_u32("general.alignment", 8);
  a.add_tensor("a", DType::F16, {3}, ramp(6, 0));
  a.add_tensor("b", DType::Q4_K, {1, 256}, ramp(144, 3));
  a.add_tensor("c", DType::I8, {2, 1, 1, 3}, ramp(6, 5));
  ok &= put(dir + "/aligned8.gguf", a.to_bytes());
  return ok;
}

bool safetensors_seeds(const std::string& dir) {
  bool ok = true;
  ok &= write_safetensors(dir + "/empty.safetensors", {}).is_ok();
  ok &= write_safetensors(dir + "/golden-like.safetensors",
                          {{"input_ids", DType::I64, {4}, ramp(32, 1)},
                           {"logits", DType::F32, {4, 3}, ramp(48, 2)}})
            .is_ok();
  ok &= write_safetensors(dir + "/mixed.safetensors",
                          {{"model.embed_tokens.weight", DType::BF16, {3, 2}, ramp(12, 3)},
                           {"h", DType::F16, {1}, ramp(2, 4)},
                           {"i", DType::I32, {}, ramp(4, 5)},
                           {"e", DType::F32, {0}, {}}})
            .is_ok();
  // With __metadata__, which the writer does not emit.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<uint8_t> b(8);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(len >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + 8, 0x3f);
  ok &= put(dir + "/metadata.safetensors", b);
  return ok;
}

// HTTP requests as a client sends them: each file starts with the piece-size byte the target
// reads first, then pipelined, chunked, malformed and hostile requests.
bool http_seeds(const std::string& dir) {
  const std::string post_json =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8080\r\nContent-Type: "
      "application/json\r\nContent-Length: 45\r\n\r\n{\"messages\":[{\"role\":\"user\","
      "\"content\":\"hi\"}]}";
  const std::string seeds[] = {
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      post_json,
      "GET /%ff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: "
      "[::1]:1\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: hearth.lan\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/json\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: "
      "chunked\r\n\r\n0\r\n\r\n",
      "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1.evil.com\r\nOrigin: "
      "http://app.example:3000\r\nAccess-Control-Request-Method: POST\r\n\r\n",
      "POST /v1/embeddings HTTP/1.0\r\nContent-Length: 12\r\n\r\n[[[[[[[[[[[[",
      // A number past double's range (nlohmann's out_of_range, once a 500).
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
      "20\r\n\r\n{\"max_tokens\":1E400}",
  };
  int i = 0;
  for (const auto& s : seeds) {
    std::vector<uint8_t> bytes(1 + s.size());
    bytes[0] = uint8_t(i * 37);  // piece sizes 1, 38, 75, ...
    std::copy(s.begin(), s.end(), bytes.begin() + 1);
    if (!put(dir + "/seed-" + std::to_string(i++), bytes)) return false;
  }
  return true;
}

// Text seeds, each behind a first byte that picks the target's parser (fuzz-grammar.cpp,
// fuzz-tokenizer.cpp; none for fuzz-jinja.cpp).
bool put_texts(const std::string& dir, const std::vector<std::pair<int, std::string>>& texts) {
  int i = 0;
  for (const auto& [pick, text] : texts) {
    std::vector<uint8_t> bytes;
    if (pick >= 0) bytes.push_back(uint8_t(pick));
    bytes.insert(bytes.end(), text.begin(), text.end());
    if (!put(dir + "/seed-" + std::to_string(i++), bytes)) return false;
  }
  return true;
}

bool jinja_seeds(const std::string& dir) {
  std::vector<std::pair<int, std::string>> texts;
  for (std::string_view name : builtin_chat_template_names())
    texts.emplace_back(-1, std::string(*builtin_chat_template(name)));
  for (const char* t :
       {"{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{% for i in range(3) %}"
        "{{ loop.index }}{% endfor %}",
        "{% set ns = namespace(a=0) %}{% for m in messages %}{% set ns.a = ns.a + 1 %}"
        "{% endfor %}{{ ns.a }}{{ messages|tojson }}",
        "{{ tools | map(attribute='name') | join(', ') }}{{ 'abc'[::-1] }}"
        "{{ {'a': 1}.items() | list }}{{ '%s-%d' % ('x', 3) }}",
        "{%- for m in messages -%}{%- if m.role == 'user' -%}{{ m.content | upper }}"
        "{%- elif m.role is defined -%}{{ m['content'][:3] }}{%- endif -%}{%- endfor -%}"
        "{{ strftime_now('%Y') }}{% raw %}{{ q }}{% endraw %}"})
    texts.emplace_back(-1, t);
  return put_texts(dir, texts);
}

bool grammar_seeds(const std::string& dir) {  // 0: GBNF, 1: JSON Schema
  return put_texts(
      dir, {{0, R"(root ::= "yes" | "no")"},
            {0, R"(root ::= object
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}"
value ::= object | string | [0-9]{1,4} | ("true" | "null")
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ["\\nt] )* "\""
ws ::= | " " | "\n" [ \t]{0,20}  # comment
)"},
            {0, R"(root ::= item{2,5} [^a-z]* . "\u00e9" [\U0001F600-\U0001F64F]+
item ::= "a" | "b" (item)?
)"},
            {1, R"({"type":"object","properties":{"name":{"type":"string","minLength":1,)"
                R"("maxLength":20},"age":{"type":"integer","minimum":0,"maximum":150}},)"
                R"("required":["name"],"additionalProperties":false})"},
            {1, R"({"type":"array","items":{"enum":["a","b",1,null,true]},"minItems":1,)"
                R"("maxItems":4})"},
            {1, R"({"oneOf":[{"type":"number","exclusiveMinimum":-1.5},{"type":"string",)"
                R"("pattern":"^[a-z]{2,3}(x|y)?$"}]})"},
            {1, R"({"type":"object","properties":{"a":{"$ref":"#/$defs/n"},"b":{"anyOf":[)"
                R"({"type":"boolean"},{"type":"null"}]},"c":{"type":"string","format":"date"}},)"
                R"("$defs":{"n":{"type":"integer","minimum":-10,"maximum":1000}}})"},
            // A pattern nested past the pattern parser's bound (it once overflowed the stack).
            {1, R"({"type":"string","pattern":")" + std::string(100000, '(') + "a" +
                    std::string(100000, ')') + R"("})"}});
}

bool tokenizer_seeds(const std::string& dir) {  // 0: SentencePiece model, 1: JSON, 2: regex
  // A SentencePiece ModelProto: pieces <unk> (type 2), <s> and </s> (type 3) and "a", a BPE
  // trainer_spec with byte fallback on, an identity normalizer.
  const std::string spm = std::string("\x0a\x0e\x0a\x05<unk>\x15\0\0\0\0\x18\x02", 16) +
                          std::string("\x0a\x0c\x0a\x03<s>\x15\0\0\0\0\x18\x03", 14) +
                          std::string("\x0a\x0d\x0a\x04</s>\x15\0\0\0\0\x18\x03", 15) +
                          std::string(
                              "\x0a\x08\x0a\x01"
                              "a"
                              "\x15\0\0\x80\xbf",
                              10) +
                          std::string("\x12\x05\x18\x02\x98\x02\x01", 7) +
                          std::string("\x1a\x02\x18\x01", 4);
  const std::string json =
      R"({"added_tokens":[{"id":5,"content":"<|endoftext|>","special":true}],)"
      R"("normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[)"
      R"({"type":"Split","pattern":{"Regex":"\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},)"
      R"("behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
      R"("use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE",)"
      R"("vocab":{"a":0,"b":1,"ab":2,"\u0120":3,"\u0120a":4},"merges":["a b","\u0120 a"]}})";
  return put_texts(
      dir, {{0, spm},
            {1, json},
            {2, R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
            {2, R"((?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
                R"(\s*[\r\n]+|\s+(?!\S)|\s+)"},
            {2, R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t)?|\p{N})"}});
}

// Request bodies behind the route byte fuzz-api.cpp reads: 0 chat, 1 completions, 2 embeddings,
// 3 /api/generate, 4 /api/chat, 5 /api/embed, 6 /api/show.
bool api_seeds(const std::string& dir) {
  return put_texts(
      dir,
      {{0, R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":)"
           R"([{"type":"text","text":"hi"}]}],"max_tokens":4,"temperature":0.7,"top_p":0.9,)"
           R"("stop":["\n"],"n":2,"seed":3,"logprobs":true,"top_logprobs":2,"stream":true,)"
           R"("stream_options":{"include_usage":true}})"},
       {0, R"({"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":)"
           R"("","tool_calls":[{"id":"c1","type":"function","function":{"name":"get",)"
           R"("arguments":"{\"city\":\"Rome\"}"}}]},{"role":"tool","tool_call_id":"c1",)"
           R"("content":"sunny"}],"tools":[{"type":"function","function":{"name":"get",)"
           R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},)"
           R"("required":["city"]}}}],"tool_choice":"auto"})"},
       {0, R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":)"
           R"("json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":)"
           R"({"a":{"type":"string","pattern":"^[a-z]+$"},"b":{"type":"integer","minimum":0}}}}},)"
           R"("logit_bias":{"29871":-100},"reasoning_format":"none"})"},
       {1, R"({"prompt":"And the king","max_tokens":8,"grammar":"root ::= \"yes\" | \"no\"",)"
           R"("frequency_penalty":0.5,"presence_penalty":0.1,"min_p":0.05,"top_k":40})"},
       {1, R"({"prompt":[1,1126,278],"max_tokens":2,"logprobs":2,)"
           R"("response_format":{"type":"json_object"}})"},
       {2, R"({"input":["In the beginning","God"],"encoding_format":"base64"})"},
       {3, R"({"model":"kjv","prompt":"a","system":"s","stream":false,"raw":false,)"
           R"("context":[1,2,3],"format":"json","options":{"num_predict":-2,"temperature":0,)"
           R"("repeat_penalty":1.1,"repeat_last_n":64,"stop":["x"],"num_ctx":512},"think":false})"},
       {4, R"({"model":"kjv","messages":[{"role":"user","content":"hi"}],"tools":[{"type":)"
           R"("function","function":{"name":"f","parameters":{"type":"object"}}}],)"
           R"("format":{"type":"object","properties":{"x":{"enum":[1,"a",null]}}},)"
           R"("keep_alive":"5m","options":{"seed":1,"top_k":5}})"},
       {5, R"({"model":"kjv","input":["a","b"],"truncate":true,"dimensions":16})"},
       {6, R"({"model":"kjv","verbose":true})"},
       // A key with a newline, quoted back in the error (which must stay one line).
       {4, R"({"model":"kjv","messages":[{"role":"user","content":"hi"}],"opt\nions":{}})"}});
}

// Edit scripts for fuzz-model.cpp: its first byte picks the base (below 0x80 a GGUF, from 0x80 a
// checkpoint directory), each edit after it is an op byte and its choices. One seed per base as
// it is, then a few edits.
bool model_seeds(const std::string& dir) {
  std::vector<std::vector<uint8_t>> scripts;
  for (uint8_t base = 0; base < 10; ++base) scripts.push_back({base});
  for (uint8_t base = 0; base < 7; ++base) scripts.push_back({uint8_t(0x80 + base)});
  scripts.push_back({0x81, 0, 0, 0, 0, 0, 0, 9});  // a config.json field set to an integer
  scripts.push_back({0x85, 5, 0, 0, 0, 6});        // an object where a field was
  scripts.push_back({0, 0, 5, 0, 0, 0, 0, 3});     // an integer metadata value replaced
  scripts.push_back({1, 3, 40, 0, 0, 0, 1, 128});  // an array cut short
  scripts.push_back({3, 7, 2, 0, 0, 0, 0, 1});     // a tensor dimension doubled
  scripts.push_back({6, 6, 9, 0, 0, 0, 20});       // another family's key
  for (size_t i = 0; i < scripts.size(); ++i)
    if (!put(dir + "/seed-" + std::to_string(i), scripts[i])) return false;
  return true;
}

// Model output for fuzz-output.cpp: a family byte (fuzz-output.cpp's kFamilies order), a flags
// byte (1: the prompt opened the reasoning), a cut seed, a stop count and length-prefixed stops,
// then the text.
bool output_seeds(const std::string& dir) {
  struct Seed {
    uint8_t family, flags;
    std::vector<std::string> stops;
    std::string text;
  };
  const std::vector<Seed> seeds = {
      {0, 0, {}, R"({"tool_calls":[{"name":"f","arguments":{"a":1}}]})"},
      {1,
       0,
       {},
       "<think>\nplan\n</think>\n\nSure.<tool_call>\n{\"name\": \"get_weather\", "
       "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
      {2, 0, {}, R"({"name": "search", "parameters": {"q": "x"}})"},
      {2, 0, {}, "<|python_tag|>search.call(q=\"x\")"},
      {3, 0, {}, R"([TOOL_CALLS][{"name": "f", "arguments": {}}])"},
      {4, 0, {}, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})"},
      {5, 1, {}, "reasoning</think>answer<\uff5ctool\u2581calls\u2581begin\uff5c>"},
      {6, 0, {}, R"(<function=f>{"a": [1, 2]}</function>)"},
      {7, 0, {}, ">>>get_weather\n{\"city\": \"Oslo\"}"},
      {8, 0, {}, R"(functools[{"name": "f", "arguments": {"x": null}}])"},
      {1, 0, {"</s>", "\n\n"}, "one line\n\ntwo</s> more"},
      {0, 1, {"ab", "b"}, "x abab <think> y"},
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    const Seed& sd = seeds[i];
    std::vector<uint8_t> b = {sd.family, sd.flags, uint8_t(i * 37), uint8_t(sd.stops.size())};
    for (const std::string& st : sd.stops) {
      b.push_back(uint8_t(st.size()));
      b.insert(b.end(), st.begin(), st.end());
    }
    b.insert(b.end(), sd.text.begin(), sd.text.end());
    if (!put(dir + "/seed-" + std::to_string(i), b)) return false;
  }
  return true;
}

// Text for fuzz-encode.cpp: a vocabulary byte (fuzz-encode.cpp's order; bit 7: parse control
// texts), then the text.
bool encode_seeds(const std::string& dir) {
  const std::vector<std::string> texts = {"Hello world",
                                          " leading space and  two",
                                          "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600!",
                                          "tabs\tand\nnewlines\r\n",
                                          "don't 12345 3.14",
                                          "<s>[INST] x [/INST]</s>",
                                          "\u0300\u0301 combining",
                                          "    indented code()",
                                          "ALLCAPS and MixedCase"};
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint8_t> b = {uint8_t(i * 5 + (i == 5 ? 0x80 : 0))};
    b.insert(b.end(), texts[i].begin(), texts[i].end());
    if (!put(dir + "/seed-" + std::to_string(i), b)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  mkdir(out.c_str(), 0755);  // existing dirs are fine
  for (const char* top : {"/seeds", "/corpus"}) {
    mkdir((out + top).c_str(), 0755);
    for (const char* sub : {"/gguf", "/safetensors", "/http", "/jinja", "/grammar", "/tokenizer",
                            "/api", "/model", "/output", "/encode"})
      mkdir((out + top + sub).c_str(), 0755);
  }
  if (!gguf_seeds(out + "/seeds/gguf") || !safetensors_seeds(out + "/seeds/safetensors") ||
      !http_seeds(out + "/seeds/http") || !jinja_seeds(out + "/seeds/jinja") ||
      !grammar_seeds(out + "/seeds/grammar") || !tokenizer_seeds(out + "/seeds/tokenizer") ||
      !api_seeds(out + "/seeds/api") || !model_seeds(out + "/seeds/model") ||
      !output_seeds(out + "/seeds/output") || !encode_seeds(out + "/seeds/encode")) {
    std::fprintf(stderr, "%s: cannot write seeds under %s\n", argv[0], out.c_str());
    return 1;
  }
  return 0;
}
