// Reads a SentencePiece `tokenizer.model` (a ModelProto protobuf) into an SpmVocab, with a
// minimal hand-written protobuf reader. To honour a new ModelProto field, add a case below.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tokenizer/spm-tokenizer.h"

namespace hearth {

// Every varint, length and field is bounds-checked; bad data is an error naming `source` and
// the field, never a crash. Only BPE models without a precompiled normalizer are accepted.
Result<SpmVocab> parse_sentencepiece_model(const uint8_t* data, uint64_t size,
                                           const std::string& source);

}  // namespace hearth
