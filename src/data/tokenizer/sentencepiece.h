// SentencePiece models (`.model` files: Llama 2, TinyLlama, or one trained by spm_train).
// Debian's libsentencepiece reads and checks the file and decodes. Encoding:
//   model_type BPE  strata's own encoder (sentencepiece_normalizer.h, sentencepiece_bpe.h),
//                   the library's ids exactly, with a cache of encoded segments where the
//                   vocabulary makes segments independent;
//   anything else   (unigram, word, char) the library's own Encode.
// Either way tokens equal spm_encode's for the same model.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace strata::data {

// Throws naming the path when the file is not a SentencePiece model.
std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path);

}  // namespace strata::data
