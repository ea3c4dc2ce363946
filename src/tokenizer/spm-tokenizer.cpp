// SentencePiece-BPE encode/decode, following the SentencePiece library: normalize (invalid UTF-8
// -> U+FFFD, spaces -> U+2581, dummy prefix), merge the best-scoring adjacent pair repeatedly
// (ties: leftmost), then byte fallback for pieces outside the vocabulary.
#include "tokenizer/spm-tokenizer.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace hearth {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁"

int parse_byte_piece(const std::string& p) {  // "<0x4A>" -> 0x4A, else -1
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = p[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return -1;
    v = v * 16 + d;
  }
  return v;
}

bool is_mergeable(TokenType t) {
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUnused ||
         t == TokenType::kUndefined;
}

}  // namespace

Status validate_spm_vocab(const SpmVocab& v, const std::string& source) {
  HEARTH_TRY((check_vocab_table<SpmVocab, &SpmVocab::pieces>(v, source)));
  const size_t n = v.pieces.size();
  if (v.scores.size() != n) {
    return Status::error(source + ": scores has " + std::to_string(v.scores.size()) +
                         " entries, tokens has " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] == TokenType::kByte && parse_byte_piece(v.pieces[i]) < 0) {
      return Status::error(source + ": byte token " + std::to_string(i) + " is not <0xNN>");
    }
    if (v.pieces[i].empty() && v.types[i] != TokenType::kUnused) {
      return Status::error(source + ": token " + std::to_string(i) + " is empty");
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(SpmVocab vocab,
                                                           const std::string& source) {
  HEARTH_TRY(validate_spm_vocab(vocab, source));
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(vocab)));
}

SpmTokenizer::SpmTokenizer(SpmVocab v) : VocabTokenizer(std::move(v)) {
  for (int& b : byte_ids_) b = -1;
  for (size_t i = 0; i < v_.pieces.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& p = v_.pieces[i];
    const TokenType t = v_.types[i];
    all_pieces_.emplace(p, id);
    if (is_mergeable(t)) mergeable_.emplace(p, id);
    if (t == TokenType::kByte) {
      const int b = parse_byte_piece(p);
      if (byte_ids_[b] < 0) byte_ids_[b] = id;
    }
    if (t == TokenType::kUserDefined) user_defined_.add(p, id);
    if (t == TokenType::kUserDefined || t == TokenType::kControl || t == TokenType::kUnknown) {
      control_.add(p, id);
    }
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  return with_bos_eos(add_special, [&](std::vector<int32_t>& out) {
    if (!parse_special) return encode_fragment(text, true, out);
    // As llama.cpp and HF's legacy Llama tokenizer do: each text run after a special token
    // starts a new "sentence" and gets its own dummy prefix.
    for (const auto& frag : control_.split(text)) {
      if (frag.id >= 0) {
        out.push_back(frag.id);
      } else {
        encode_fragment(frag.text, true, out);
      }
    }
  });
}

void SpmTokenizer::encode_fragment(std::string_view text, bool dummy_prefix,
                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string norm;
  norm.reserve(text.size() + 8);
  const std::string_view space = v_.escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
  size_t pos = 0;
  if (v_.remove_extra_whitespaces) {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    if (pos == text.size()) return;
  }
  const bool prefix = dummy_prefix && v_.add_dummy_prefix;
  if (prefix && !v_.treat_whitespace_as_suffix) norm.append(space);
  bool prev_space = false;
  while (pos < text.size()) {
    if (!user_defined_.empty()) {
      // User-defined symbols pass through normalization untouched, as in SentencePiece.
      auto [id, len] = user_defined_.match_at(text, pos);
      if (id >= 0) {
        norm.append(text.substr(pos, len));
        pos += len;
        prev_space = false;
        continue;
      }
    }
    uint32_t cp;
    const int n = utf8::decode(text, pos, &cp);
    if (n == 0) {
      utf8::append(norm, utf8::kReplacement);
      ++pos;
      prev_space = false;
      continue;
    }
    if (cp == ' ') {
      if (!(v_.remove_extra_whitespaces && prev_space)) norm.append(space);
      prev_space = true;
    } else {
      norm.append(text.substr(pos, n));
      prev_space = false;
    }
    pos += n;
  }
  if (v_.remove_extra_whitespaces && prev_space && norm.ends_with(space)) {
    norm.resize(norm.size() - space.size());
  }
  if (prefix && v_.treat_whitespace_as_suffix) norm.append(space);
  encode_normalized(norm, out);
}

void SpmTokenizer::encode_normalized(const std::string& s, std::vector<int32_t>& out) const {
  struct Sym {
    int prev, next;
    size_t start, len;
    bool frozen;
  };
  std::vector<Sym> syms;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = 0;
    bool frozen = false;
    if (!user_defined_.empty()) {
      auto m = user_defined_.match_at(s, pos);
      if (m.first >= 0) len = m.second, frozen = true;
    }
    if (len == 0) {
      uint32_t cp;
      const int n = utf8::decode(s, pos, &cp);
      len = n > 0 ? n : 1;  // normalization already replaced invalid bytes
    }
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, pos + len < s.size() ? idx + 1 : -1, pos, len, frozen});
    pos += len;
  }
  if (syms.empty()) return;

  struct Pair {
    float score;
    int left, right;
    size_t size;
  };
  auto worse = [](const Pair& a, const Pair& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
  std::unordered_map<std::string, std::pair<std::string, std::string>> rev_merge;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0 || syms[l].frozen || syms[r].frozen) return;
    const size_t size = syms[l].len + syms[r].len;
    auto it = mergeable_.find(s.substr(syms[l].start, size));
    if (it == mergeable_.end()) return;
    agenda.push({v_.scores[it->second], l, r, size});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Sym& l = syms[top.left];
    Sym& r = syms[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.size) continue;  // stale entry
    const std::string merged = s.substr(l.start, top.size);
    auto it = mergeable_.find(merged);
    if (it != mergeable_.end() && v_.types[it->second] == TokenType::kUnused) {
      rev_merge[merged] = {s.substr(l.start, l.len), s.substr(r.start, r.len)};
    }
    l.len = top.size;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = top.left;
    r.len = 0;
    try_add(l.prev, top.left);
    try_add(top.left, l.next);
  }

  bool prev_unk = false;
  auto emit_piece = [&](auto&& self, const std::string& piece) -> void {
    auto it = all_pieces_.find(piece);
    const int32_t id = it == all_pieces_.end() ? v_.unk_id : it->second;
    if (id >= 0 && v_.types[id] == TokenType::kUnused) {
      // Unused pieces may help merging but never appear in output: split them back.
      auto rm = rev_merge.find(piece);
      if (rm != rev_merge.end()) {
        self(self, rm->second.first);
        self(self, rm->second.second);
        return;
      }
    }
    const bool is_unk = id == v_.unk_id || id < 0;
    if (is_unk && v_.byte_fallback) {
      for (unsigned char b : piece) {
        const int32_t bid = byte_ids_[b] >= 0 ? byte_ids_[b] : v_.unk_id;
        if (bid >= 0) out.push_back(bid);
      }
      prev_unk = false;
      return;
    }
    if (is_unk) {
      // A run of unknown characters becomes one unknown id, as SentencePiece does.
      if (!prev_unk && id >= 0) out.push_back(id);
      prev_unk = true;
      return;
    }
    out.push_back(id);
    prev_unk = false;
  };
  for (int i = 0; i >= 0; i = syms[i].next) {
    emit_piece(emit_piece, s.substr(syms[i].start, syms[i].len));
  }
}

std::string SpmTokenizer::token_bytes(int32_t id) const {
  if (!in_range(id)) return "";
  const std::string& p = v_.pieces[id];
  switch (v_.types[id]) {
    case TokenType::kControl:
      return "";
    case TokenType::kUnknown:
      return v_.unk_surface;
    case TokenType::kByte:
      return std::string(1, static_cast<char>(parse_byte_piece(p)));
    default:
      break;
  }
  std::string out;
  out.reserve(p.size());
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out.push_back(' ');
      i += kSpaceSymbol.size();
    } else {
      out.push_back(p[i++]);
    }
  }
  return out;
}

}  // namespace hearth
