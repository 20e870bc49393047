// SentencePiece models (`.model` files: Llama 2, TinyLlama, or one trained by spm_train),
// through Debian's libsentencepiece. Encoding is the library's own, so tokens equal
// spm_encode's for the same model.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace strata::data {

// Throws naming the path when the file is not a SentencePiece model.
std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path);

}  // namespace strata::data
