// Training a byte-level BPE vocabulary on a corpus (`strata data tokenizer-train`), written as
// Hugging Face's GPT-2 files (vocab.json + merges.txt) that BpeTokenizer and `tokenizers`
// read.
//
// Algorithm. The corpus is split into words by GPT-2's pre-tokenizer (bpe.h) and the words
// counted; every word starts as its bytes. Each round merges the adjacent pair of symbols
// with the highest count over all words (weighted by the word's count); ties go to the pair
// whose two symbols' bytes compare smallest (first symbol, then second), so the result is a
// function of the corpus alone. Rounds stop at `vocab_size` tokens (256 bytes + merges +
// specials) or when no pair occurs at least `min_frequency` times.
//
// Ids: the 256 bytes first (byte b has id b), then merges in order, then the special tokens.
//
// Cost. Pair counts are kept incrementally: a merge touches only the words that hold the pair
// (an index from pair to words), and the best pair comes from a max-heap with stale entries
// skipped, so training is about O(corpus words + merges x words touched x log pairs).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::data {

struct BpeTrainOptions {
  int64_t vocab_size = 8192;
  int64_t min_frequency = 2;
  std::vector<std::string> specials = {"<|endoftext|>"};
};

struct BpeVocabulary {
  std::vector<std::string> tokens;                          // by id: bytes of each token
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, as bytes
};

using WordCounts = std::unordered_map<std::string, int64_t>;

// Adds the pre-tokenizer's words of `text` to `counts`.
void count_words(const std::string& text, WordCounts& counts);

// Throws, naming the flag, when vocab_size cannot hold the 256 bytes and the specials, or a
// special token is empty, given twice or spelled as a byte's token in vocab.json (where a
// special is written as its text and every other token in GPT-2's byte alphabet).
void check_options(const BpeTrainOptions& o);

// check_options(o), then trains; throws when a special equals a learned token (before any
// file is written: the two would share one vocab.json key and an id would be lost).
BpeVocabulary train_bpe(const WordCounts& counts, const BpeTrainOptions& o);

// Writes DIR/vocab.json and DIR/merges.txt ("#version: 0.2" first, as GPT-2's).
void write_bpe_files(const BpeVocabulary& v, const std::string& dir);

}  // namespace strata::data
