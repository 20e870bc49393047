#include "data/tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>

#include <stdexcept>

#include "data/tokenizer/sentencepiece_bpe.h"
#include "data/tokenizer/sentencepiece_model.h"
#include "data/tokenizer/sentencepiece_normalizer.h"

namespace strata::data {
namespace {

// strata's encoder for a BPE model: immutable, shared by every clone.
struct OwnEncoder {
  OwnEncoder(const SentencePieceModel& model, const std::string& path) : normalizer(model, path), bpe(model, path) {}
  SentencePieceNormalizer normalizer;
  SentencePieceBpe bpe;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp,
                         std::shared_ptr<const OwnEncoder> own, const std::string& path)
      : sp_(std::move(sp)), own_(std::move(own)) {
    files_ = {path};
  }
  void encode(std::string_view text, std::vector<int32_t>& out) override {
    if (!own_) {
      ids_.clear();
      const auto status = sp_->Encode(text, &ids_);
      if (!status.ok()) throw std::runtime_error("sentencepiece encode: " + status.ToString());
      out.insert(out.end(), ids_.begin(), ids_.end());
      return;
    }
    own_->normalizer.normalize(text, normalized_);
    if (normalized_.empty()) return;
    if (own_->bpe.segments_are_independent())
      encode_segments(out);
    else
      own_->bpe.encode(normalized_, out, scratch_);
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    const int n = sp_->GetPieceSize();
    for (const int32_t id : ids)
      if (id < 0 || id >= n)
        throw std::runtime_error("decode: token id " + std::to_string(id) + " is outside the vocabulary of " +
                                 std::to_string(n));
    std::string text;
    const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) throw std::runtime_error("sentencepiece decode: " + status.ToString());
    return text;
  }
  int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  int32_t special_id(std::string_view name) const override {
    const int id = sp_->PieceToId(name);
    // PieceToId answers unk_id for an unknown piece: only a piece that is itself unk counts.
    if (id == sp_->unk_id() && sp_->IdToPiece(id) != name) return -1;
    return id;
  }
  int32_t document_token() const override { return sp_->bos_id(); }
  std::string kind() const override { return "sentencepiece"; }
  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<SentencePieceTokenizer>(sp_, own_, files_[0]);
  }

 private:
  // Cuts the normalized text before every space that follows a non-space character (see
  // sentencepiece_bpe.h) and encodes each segment through the cache.
  void encode_segments(std::vector<int32_t>& out) {
    const std::string_view text = normalized_;
    const std::string& space = own_->bpe.space();
    size_t start = 0;
    for (size_t at = text.find(space, 1);; at = text.find(space, at + space.size())) {
      if (at == std::string_view::npos) {
        encode_segment(text.substr(start), out);
        return;
      }
      if (at < space.size() || text.compare(at - space.size(), space.size(), space) != 0) {
        encode_segment(text.substr(start, at - start), out);
        start = at;
      }
    }
  }
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) {
    if (segment.size() > SegmentCache::kMaxKey) {
      own_->bpe.encode(segment, out, scratch_);
      return;
    }
    const uint64_t hash = SegmentCache::hash(segment);
    if (cache_.find(segment, hash, out)) return;
    const size_t before = out.size();
    own_->bpe.encode(segment, out, scratch_);
    cache_.insert(segment, hash, out.data() + before, out.size() - before);
  }

  // Encode and Decode are const on the processor: every clone shares it, and the encoder.
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  std::shared_ptr<const OwnEncoder> own_;  // null: the library encodes
  std::vector<int> ids_;
  std::string normalized_;
  SentencePieceBpe::Scratch scratch_;
  SegmentCache cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok())
    throw std::runtime_error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  std::shared_ptr<const OwnEncoder> own;
  const SentencePieceModel model = parse_sentencepiece_model(sp->serialized_model_proto(), path);
  // Unigram, word and char models keep the library's encoder.
  if (model.model_type == SentencePieceModel::ModelType::bpe) own = std::make_shared<const OwnEncoder>(model, path);
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), std::move(own), path);
}

}  // namespace strata::data
