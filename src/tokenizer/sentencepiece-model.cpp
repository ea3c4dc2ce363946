// ModelProto reader: pieces (1), trainer_spec (2), normalizer_spec (3). Field numbers follow
// sentencepiece_model.proto; unknown fields are skipped by wire type, as protobuf requires.
#include "tokenizer/sentencepiece-model.h"

#include <cstring>

namespace hearth {
namespace {

class Reader {
 public:
  Reader(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  bool done() const { return pos_ >= n_; }

  bool varint(uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= n_) return false;
      const uint8_t b = p_[pos_++];
      if (shift == 63 && (b & 0x7E)) return false;  // more than 64 bits
      r |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) {
        *v = r;
        return true;
      }
    }
    return false;
  }
  bool fixed32(uint32_t* v) {
    if (n_ - pos_ < 4) return false;
    std::memcpy(v, p_ + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool bytes(const uint8_t** data, uint64_t* len) {
    uint64_t l;
    if (!varint(&l) || l > n_ - pos_) return false;
    *data = p_ + pos_;
    *len = l;
    pos_ += l;
    return true;
  }
  bool skip(uint32_t wire) {
    uint64_t v;
    const uint8_t* d;
    switch (wire) {
      case 0:
        return varint(&v);
      case 1:
        if (n_ - pos_ < 8) return false;
        pos_ += 8;
        return true;
      case 2:
        return bytes(&d, &v);
      case 5:
        if (n_ - pos_ < 4) return false;
        pos_ += 4;
        return true;
      default:
        return false;  // groups (3, 4) are not used by sentencepiece; anything else is corrupt
    }
  }
  uint64_t pos() const { return pos_; }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

// Reads the tag; `field` 0 is invalid in protobuf.
bool read_tag(Reader& r, uint32_t* field, uint32_t* wire) {
  uint64_t tag;
  if (!r.varint(&tag)) return false;
  if ((tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire = static_cast<uint32_t>(tag & 7);
  return true;
}

Status bad(const std::string& source, const std::string& what) {
  return Status::error(source + ": " + what);
}

Status parse_piece(const uint8_t* d, uint64_t n, size_t index, SpmVocab& v,
                   const std::string& source) {
  Reader r(d, n);
  const std::string where = "pieces[" + std::to_string(index) + "]";
  std::string piece;
  float score = 0;
  int64_t type = 1;  // NORMAL is the proto default
  while (!r.done()) {
    uint32_t field, wire;
    if (!read_tag(r, &field, &wire)) return bad(source, where + ": malformed tag");
    if (field == 1 && wire == 2) {
      const uint8_t* s;
      uint64_t len;
      if (!r.bytes(&s, &len)) return bad(source, where + ".piece: length past end");
      piece.assign(reinterpret_cast<const char*>(s), len);
    } else if (field == 2 && wire == 5) {
      uint32_t bits;
      if (!r.fixed32(&bits)) return bad(source, where + ".score: truncated");
      std::memcpy(&score, &bits, 4);
    } else if (field == 3 && wire == 0) {
      uint64_t t;
      if (!r.varint(&t)) return bad(source, where + ".type: malformed varint");
      type = static_cast<int64_t>(t);
      if (type < 1 || type > 6) {
        return bad(source, where + ".type: unknown piece type " + std::to_string(type));
      }
    } else if (!r.skip(wire)) {
      return bad(source, where + ": field " + std::to_string(field) + " is malformed");
    }
  }
  v.pieces.push_back(std::move(piece));
  v.scores.push_back(score);
  v.types.push_back(static_cast<TokenType>(type));
  return Status::ok();
}

struct TrainerFields {
  int64_t model_type = 1;  // UNIGRAM is the proto default
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string unk_surface = " \xE2\x81\x87 ";
};

Status parse_trainer(const uint8_t* d, uint64_t n, TrainerFields& t, const std::string& source) {
  Reader r(d, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!read_tag(r, &field, &wire)) return bad(source, "trainer_spec: malformed tag");
    const std::string where = "trainer_spec field " + std::to_string(field);
    if (wire == 0 && (field == 3 || field == 24 || field == 35 || (field >= 40 && field <= 43))) {
      uint64_t v;
      if (!r.varint(&v)) return bad(source, where + ": malformed varint");
      // int32 fields: negative values arrive sign-extended to 64 bits.
      const auto sv = static_cast<int64_t>(v);
      if (field >= 40 && (sv < INT32_MIN || sv > INT32_MAX)) {
        return bad(source, where + ": id " + std::to_string(sv) + " out of int32 range");
      }
      switch (field) {
        case 3:
          t.model_type = sv;
          break;
        case 24:
          t.treat_whitespace_as_suffix = v != 0;
          break;
        case 35:
          t.byte_fallback = v != 0;
          break;
        case 40:
          t.unk_id = sv;
          break;
        case 41:
          t.bos_id = sv;
          break;
        case 42:
          t.eos_id = sv;
          break;
        case 43:
          t.pad_id = sv;
          break;
      }
    } else if (field == 44 && wire == 2) {
      const uint8_t* s;
      uint64_t len;
      if (!r.bytes(&s, &len)) return bad(source, "trainer_spec.unk_surface: length past end");
      t.unk_surface.assign(reinterpret_cast<const char*>(s), len);
    } else if (!r.skip(wire)) {
      return bad(source, where + " is malformed");
    }
  }
  return Status::ok();
}

Status parse_normalizer(const uint8_t* d, uint64_t n, SpmVocab& v, const std::string& source) {
  Reader r(d, n);
  while (!r.done()) {
    uint32_t field, wire;
    if (!read_tag(r, &field, &wire)) return bad(source, "normalizer_spec: malformed tag");
    const std::string where = "normalizer_spec field " + std::to_string(field);
    if (field == 2 && wire == 2) {
      const uint8_t* s;
      uint64_t len;
      if (!r.bytes(&s, &len)) return bad(source, "normalizer_spec.precompiled_charsmap: past end");
      if (len != 0) {
        // A charsmap means NFKC-style rewriting (T5, ALBERT...), which Llama models never use.
        return bad(source,
                   "normalizer_spec.precompiled_charsmap: only the identity normalizer "
                   "is supported");
      }
    } else if (wire == 0 && field >= 3 && field <= 5) {
      uint64_t b;
      if (!r.varint(&b)) return bad(source, where + ": malformed varint");
      if (field == 3) v.add_dummy_prefix = b != 0;
      if (field == 4) v.remove_extra_whitespaces = b != 0;
      if (field == 5) v.escape_whitespaces = b != 0;
    } else if (!r.skip(wire)) {
      return bad(source, where + " is malformed");
    }
  }
  return Status::ok();
}

}  // namespace

Result<SpmVocab> parse_sentencepiece_model(const uint8_t* data, uint64_t size,
                                           const std::string& source) {
  SpmVocab v;
  // Proto defaults for NormalizerSpec, used when the message is absent.
  v.add_dummy_prefix = true;
  v.remove_extra_whitespaces = true;
  v.escape_whitespaces = true;
  TrainerFields t;
  Reader r(data, size);
  while (!r.done()) {
    uint32_t field, wire;
    if (!read_tag(r, &field, &wire)) {
      return bad(source, "malformed protobuf tag at offset " + std::to_string(r.pos()));
    }
    if (wire == 2 && (field == 1 || field == 2 || field == 3)) {
      const uint8_t* d;
      uint64_t len;
      if (!r.bytes(&d, &len)) {
        return bad(source, "field " + std::to_string(field) + ": length past end of file");
      }
      if (field == 1) {
        if (v.pieces.size() >= 0x7FFFFFFF) return bad(source, "pieces: too many pieces");
        HEARTH_TRY(parse_piece(d, len, v.pieces.size(), v, source));
      } else if (field == 2) {
        HEARTH_TRY(parse_trainer(d, len, t, source));
      } else {
        HEARTH_TRY(parse_normalizer(d, len, v, source));
      }
    } else if (!r.skip(wire)) {
      return bad(source, "field " + std::to_string(field) + " is malformed");
    }
  }
  if (v.pieces.empty()) return bad(source, "pieces: the model has no pieces");
  if (t.model_type != 2) {
    static const char* names[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    const std::string name =
        t.model_type >= 1 && t.model_type <= 4 ? names[t.model_type] : std::to_string(t.model_type);
    return bad(source, "trainer_spec.model_type is " + name + "; only BPE models are supported");
  }
  const auto n = static_cast<int64_t>(v.pieces.size());
  auto id_field = [&](int64_t id, const char* name, int32_t* out) -> Status {
    if (id < -1 || id >= n) {
      return bad(source, std::string("trainer_spec.") + name + " " + std::to_string(id) +
                             " outside the " + std::to_string(n) + " pieces");
    }
    *out = static_cast<int32_t>(id);
    return Status::ok();
  };
  HEARTH_TRY(id_field(t.unk_id, "unk_id", &v.unk_id));
  HEARTH_TRY(id_field(t.bos_id, "bos_id", &v.bos_id));
  HEARTH_TRY(id_field(t.eos_id, "eos_id", &v.eos_id));
  HEARTH_TRY(id_field(t.pad_id, "pad_id", &v.pad_id));
  v.byte_fallback = t.byte_fallback;
  v.treat_whitespace_as_suffix = t.treat_whitespace_as_suffix;
  v.unk_surface = t.unk_surface;
  v.add_bos = true;  // SentencePiece Llama convention; tokenizer_config.json may override
  v.add_eos = false;
  HEARTH_TRY(validate_spm_vocab(v, source));
  return v;
}

}  // namespace hearth
