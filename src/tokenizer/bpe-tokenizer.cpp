// Byte-level BPE: split out added/special tokens, pre-tokenize, map bytes to printable code
// points, merge the lowest-rank adjacent pair repeatedly (ties: leftmost), look the symbols up.
#include "tokenizer/bpe-tokenizer.h"

#include <unicode/unorm2.h>

#include <queue>

#include "tokenizer/utf8.h"

namespace hearth {
namespace {

struct ByteTable {
  uint32_t to_cp[256];
  int16_t from_cp[324];  // every mapped code point is below 256 + 68
  ByteTable() {
    for (auto& f : from_cp) f = -1;
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes map to themselves; the rest to 256, 257, ... in byte order.
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      to_cp[b] = printable ? b : 256 + extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

// NFC of the valid UTF-8 runs of `text`; invalid bytes pass through unchanged.
std::string nfc(std::string_view text) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return std::string(text);
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    std::vector<UChar> u16;
    uint32_t cp;
    int len;
    while (end < text.size() && (len = utf8::decode(text, end, &cp)) > 0) {
      if (cp >= 0x10000) {
        u16.push_back(static_cast<UChar>(0xD7C0 + (cp >> 10)));
        u16.push_back(static_cast<UChar>(0xDC00 | (cp & 0x3FF)));
      } else {
        u16.push_back(static_cast<UChar>(cp));
      }
      end += len;
    }
    if (!u16.empty()) {
      err = U_ZERO_ERROR;
      std::vector<UChar> norm(u16.size() * 3 + 8);
      const int32_t m = unorm2_normalize(n, u16.data(), static_cast<int32_t>(u16.size()),
                                         norm.data(), static_cast<int32_t>(norm.size()), &err);
      if (U_FAILURE(err)) {
        out.append(text.substr(pos, end - pos));
      } else {
        for (int32_t i = 0; i < m; ++i) {
          uint32_t c = norm[i];
          if (c >= 0xD800 && c <= 0xDBFF && i + 1 < m) {
            c = 0x10000 + ((c - 0xD800) << 10) + (norm[++i] - 0xDC00);
          }
          utf8::append(out, c);
        }
      }
    }
    if (end < text.size()) out.push_back(text[end++]);  // an invalid byte
    pos = end;
  }
  return out;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) {
  return byte_table().to_cp[b];
}
int byte_from_unicode(uint32_t cp) {
  return cp < 324 ? byte_table().from_cp[cp] : -1;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeVocab vocab,
                                                           const std::string& source) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(vocab)));
  HEARTH_TRY(t->build(source));
  return t;
}

Status BpeTokenizer::build(const std::string& source) {
  const size_t n = v_.tokens.size();
  if (v_.types.empty()) v_.types.assign(n, TokenType::kNormal);
  HEARTH_TRY((check_vocab_table<BpeVocab, &BpeVocab::tokens>(v_, source)));
  for (int& b : byte_ids_) b = -1;
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    ids_.emplace(v_.tokens[i], id);
    if (v_.types[i] == TokenType::kUserDefined) user_defined_.add(v_.tokens[i], id);
    if (v_.types[i] == TokenType::kUserDefined || v_.types[i] == TokenType::kControl) {
      special_.add(v_.tokens[i], id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, byte_to_unicode(static_cast<uint8_t>(b)));
    auto it = ids_.find(s);
    if (it != ids_.end()) byte_ids_[b] = it->second;
  }
  merges_.reserve(v_.merges.size());
  for (size_t r = 0; r < v_.merges.size(); ++r) {
    const auto& [a, b] = v_.merges[r];
    auto ia = ids_.find(a);
    auto ib = ids_.find(b);
    auto im = ids_.find(a + b);
    if (ia == ids_.end() || ib == ids_.end() || im == ids_.end()) {
      return Status::error(source + ": merges[" + std::to_string(r) + "] \"" + a + " " + b +
                           "\" uses a token outside the vocabulary");
    }
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    merges_.emplace(key, Merge{static_cast<int32_t>(r), im->second});  // first rank wins
  }
  return Status::ok();
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  // Added tokens are found before normalization and pre-tokenization, as in HF tokenizers;
  // control (special) tokens only when the caller asks for them.
  const SpecialTokenMatcher& m = parse_special ? special_ : user_defined_;
  return with_bos_eos(add_special, [&](std::vector<int32_t>& out) {
    for (const auto& frag : m.split(text)) {
      if (frag.id >= 0) {
        out.push_back(frag.id);
      } else {
        encode_text(frag.text, out);
      }
    }
  });
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string buf;
  if (v_.nfc) {
    buf = nfc(text);
    text = buf;
  }
  if (v_.add_prefix_space && !text.empty() && text[0] != ' ') {
    std::string prefixed(1, ' ');
    prefixed.append(text);
    buf = std::move(prefixed);
    text = buf;
  }
  for (auto [b, e] : pre_tokenize(v_.pre, text)) encode_piece(text.substr(b, e - b), out);
}

void BpeTokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (v_.ignore_merges) {
    std::string mapped;
    for (unsigned char b : bytes) utf8::append(mapped, byte_to_unicode(b));
    auto it = ids_.find(mapped);
    if (it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int prev, next;
  };
  std::vector<Sym> syms(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    syms[i] = {byte_ids_[static_cast<uint8_t>(bytes[i])], static_cast<int>(i) - 1,
               i + 1 < bytes.size() ? static_cast<int>(i) + 1 : -1};
  }
  struct Pair {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id, merged;
  };
  auto worse = [](const Pair& a, const Pair& b) {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
    const uint64_t key =
        (static_cast<uint64_t>(syms[l].id) << 32) | static_cast<uint32_t>(syms[r].id);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    agenda.push({it->second.rank, l, r, syms[l].id, syms[r].id, it->second.merged});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair p = agenda.top();
    agenda.pop();
    Sym& l = syms[p.left];
    Sym& r = syms[p.right];
    // Stale when either side was merged since this pair was queued.
    if (l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
    l.id = p.merged;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    r.id = -2;
    r.next = -1;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    if (syms[i].id >= 0) {
      out.push_back(syms[i].id);
    } else if (v_.model_unk_id >= 0) {
      out.push_back(v_.model_unk_id);  // a byte the vocabulary lacks (else it is dropped)
    }
  }
}

std::vector<std::string> BpeTokenizer::pre_tokenize_text(std::string_view text) const {
  std::vector<std::string> out;
  for (auto [b, e] : pre_tokenize(v_.pre, text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (!in_range(id)) return "";
  const std::string& t = v_.tokens[id];
  switch (v_.types[id]) {
    case TokenType::kControl:
      return "";
    case TokenType::kUserDefined:
      return t;  // added tokens are stored as plain text
    default:
      break;
  }
  std::string out;
  size_t pos = 0;
  while (pos < t.size()) {
    uint32_t cp;
    const int n = utf8::decode(t, pos, &cp);
    const int b = n > 0 ? byte_from_unicode(cp) : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(t, pos, n > 0 ? n : 1);  // not a mapped byte: keep as is
    }
    pos += n > 0 ? n : 1;
  }
  return out;
}

}  // namespace hearth
