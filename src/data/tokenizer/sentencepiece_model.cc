#include "data/tokenizer/sentencepiece_model.h"

#include <cstring>

#include "core/error.h"

namespace strata::data {
namespace {

// Protobuf's wire format: each field is a varint key (number << 3 | wire type) and a value:
// 0 a varint, 1 eight bytes, 2 a varint length and that many bytes, 5 four bytes.
class WireReader {
 public:
  WireReader(std::string_view bytes, size_t base, const std::string& path) : s_(bytes), base_(base), path_(path) {}
  bool done() const { return at_ >= s_.size(); }

  // Reads the next key; `wire` is its wire type.
  uint32_t next_field(uint32_t& wire) {
    const uint64_t key = varint();
    wire = static_cast<uint32_t>(key & 7);
    return static_cast<uint32_t>(key >> 3);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<uint8_t>(s_[at_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail(path_, ": not a SentencePiece model (a varint longer than 10 bytes at byte ", offset(), ")");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    need(n);
    const std::string_view v = s_.substr(at_, n);
    at_ += n;
    return v;
  }
  float fixed32_float() {
    need(4);
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) bits |= uint32_t(static_cast<uint8_t>(s_[at_ + k])) << (8 * k);
    at_ += 4;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  // Where the bytes of the field just read began in the whole file (to name nested defects).
  size_t offset() const { return base_ + at_; }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1: need(8), at_ += 8; return;
      case 2: bytes(); return;
      case 5: need(4), at_ += 4; return;
      default: fail(path_, ": not a SentencePiece model (wire type ", wire, " at byte ", offset(), ")");
    }
  }
  void expect(uint32_t wire, uint32_t want, uint32_t field) const {
    STRATA_CHECK(wire == want, path_, ": not a SentencePiece model (field ", field, " has wire type ", wire,
                 " at byte ", offset(), ", expected ", want, ")");
  }

 private:
  void need(uint64_t n) const {
    STRATA_CHECK(n <= s_.size() - at_, path_, ": truncated SentencePiece model (", n, " bytes wanted at byte ",
                 offset(), ", ", s_.size() - at_, " left)");
  }
  std::string_view s_;
  size_t at_ = 0;
  size_t base_;
  const std::string& path_;
};

// A nested message's reader, its offsets counted in the whole file.
WireReader nested(WireReader& r, const std::string& path) {
  const std::string_view body = r.bytes();
  return WireReader(body, r.offset() - body.size(), path);
}

SentencePieceModel::Piece read_piece(WireReader r, const std::string& path) {
  SentencePieceModel::Piece p;
  while (!r.done()) {
    uint32_t wire = 0;
    const uint32_t field = r.next_field(wire);
    if (field == 1) {
      r.expect(wire, 2, field);
      p.text = std::string(r.bytes());
    } else if (field == 2) {
      r.expect(wire, 5, field);
      p.score = r.fixed32_float();
    } else if (field == 3) {
      r.expect(wire, 0, field);
      const uint64_t type = r.varint();
      STRATA_CHECK(type >= 1 && type <= 6, path, ": not a SentencePiece model (piece type ", type, " at byte ",
                   r.offset(), ")");
      p.type = static_cast<SentencePieceModel::PieceType>(type);
    } else {
      r.skip(wire);
    }
  }
  return p;
}

void read_trainer_spec(WireReader r, SentencePieceModel& m) {
  while (!r.done()) {
    uint32_t wire = 0;
    const uint32_t field = r.next_field(wire);
    if (field == 3 && wire == 0) {
      m.model_type = static_cast<SentencePieceModel::ModelType>(r.varint());
    } else if (field == 24 && wire == 0) {
      m.treat_whitespace_as_suffix = r.varint() != 0;
    } else if (field == 35 && wire == 0) {
      m.byte_fallback = r.varint() != 0;
    } else {
      r.skip(wire);
    }
  }
}

void read_normalizer_spec(WireReader r, SentencePieceModel& m) {
  while (!r.done()) {
    uint32_t wire = 0;
    const uint32_t field = r.next_field(wire);
    if (field == 1 && wire == 2) {
      m.normalizer_name = std::string(r.bytes());
    } else if (field == 2 && wire == 2) {
      m.precompiled_charsmap = std::string(r.bytes());
    } else if (field >= 3 && field <= 5 && wire == 0) {
      const bool on = r.varint() != 0;
      (field == 3 ? m.add_dummy_prefix : field == 4 ? m.remove_extra_whitespaces : m.escape_whitespaces) = on;
    } else {
      r.skip(wire);
    }
  }
}

}  // namespace

SentencePieceModel parse_sentencepiece_model(std::string_view proto, const std::string& path) {
  SentencePieceModel m;
  WireReader r(proto, 0, path);
  while (!r.done()) {
    uint32_t wire = 0;
    const uint32_t field = r.next_field(wire);
    if (field >= 1 && field <= 3) {
      r.expect(wire, 2, field);
      WireReader body = nested(r, path);
      if (field == 1) m.pieces.push_back(read_piece(body, path));
      if (field == 2) read_trainer_spec(body, m);
      if (field == 3) read_normalizer_spec(body, m);
    } else {
      r.skip(wire);
    }
  }
  STRATA_CHECK(!m.pieces.empty(), path, ": not a SentencePiece model (no pieces)");
  return m;
}

}  // namespace strata::data
