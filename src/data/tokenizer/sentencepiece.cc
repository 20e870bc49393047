#include "data/tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>

#include <stdexcept>

namespace strata::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp,
                                  const std::string& path)
      : sp_(std::move(sp)) {
    files_ = {path};
  }
  void encode(std::string_view text, std::vector<int32_t>& out) override {
    ids_.clear();
    const auto status = sp_->Encode(text, &ids_);
    if (!status.ok()) throw std::runtime_error("sentencepiece encode: " + status.ToString());
    out.insert(out.end(), ids_.begin(), ids_.end());
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
    return std::make_unique<SentencePieceTokenizer>(sp_, files_[0]);
  }

 private:
  // Encode and Decode are const on the processor: every clone shares it.
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  std::vector<int> ids_;
};

}  // namespace

std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok())
    throw std::runtime_error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), path);
}

}  // namespace strata::data
