// A SentencePiece model as its `.model` file holds it: a serialized ModelProto
// (sentencepiece_model.proto), read here from protobuf's wire format because Debian ships the
// library without the message's header. Only what encoding needs is kept: the pieces, the
// trainer fields that change encoding, and the normalizer spec; every other field is skipped.
//
//   ModelProto      1 pieces (repeated)   2 trainer_spec   3 normalizer_spec
//   SentencePiece   1 piece   2 score (float)   3 type (enum, NORMAL when absent)
//   TrainerSpec     3 model_type (UNIGRAM when absent)   24 treat_whitespace_as_suffix
//                   35 byte_fallback
//   NormalizerSpec  1 name   2 precompiled_charsmap   3 add_dummy_prefix   4 remove_extra_whitespaces
//                   5 escape_whitespaces   (the three booleans are true when absent)
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

struct SentencePieceModel {
  // The values of ModelProto.SentencePiece.Type and TrainerSpec.ModelType.
  enum class PieceType : uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  enum class ModelType : uint8_t { unigram = 1, bpe = 2, word = 3, character = 4 };
  struct Piece {
    std::string text;
    float score = 0;
    PieceType type = PieceType::normal;
  };
  std::vector<Piece> pieces;  // by id
  ModelType model_type = ModelType::unigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string normalizer_name;
  std::string precompiled_charsmap;  // empty: no character mapping (the "identity" rule)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses a serialized ModelProto; throws one line naming `path` and the byte offset of a defect.
SentencePieceModel parse_sentencepiece_model(std::string_view proto, const std::string& path);

}  // namespace strata::data
