// The tokenizer a data set was prepared with, chosen by its file: the one interface that
// `strata data prepare` encodes with and `strata train` decodes samples with.
//
//   DIR with tokenizer.json, or a tokenizer.json   byte-level BPE (GPT-2, Llama 3 family)
//   DIR with vocab.json + merges.txt               byte-level BPE (GPT-2's own files)
//   FILE.model                                     SentencePiece (Llama 2, TinyLlama)
//
// Documents. Every document of a prepared set starts with one *document token*, as llm.c's
// recipes do: <|endoftext|> for BPE vocabularies that have it, the beginning-of-sentence
// piece (<s>) for SentencePiece. The token never comes out of encoding ordinary text, so its
// positions are exactly the document boundaries.
//
// Threads. encode() may keep a cache and is not thread-safe; clone() gives each thread its
// own (cheap for SentencePiece, a copy of the tables for BPE).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Encodes text with no special tokens recognised (they are plain text).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The id of a special/control token by name, or -1.
  virtual int32_t special_id(std::string_view name) const = 0;
  // The token placed at the start of every document (see above), or -1 when it has none.
  virtual int32_t document_token() const = 0;
  virtual std::string kind() const = 0;  // "bpe" or "sentencepiece"
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
  // The files it was read from, to copy beside prepared data (names within a directory).
  const std::vector<std::string>& files() const { return files_; }

 protected:
  std::vector<std::string> files_;
};

// Opens the tokenizer at `path` (see the table above). Throws one line naming the path and
// what is wrong (missing files, an unknown model type, a truncated or malformed file).
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path);

// xxh64 over the tokenizer's files, in order: the identity a manifest records.
uint64_t tokenizer_hash(const Tokenizer& t);

}  // namespace strata::data
