#include "data/tokenizer/tokenizer.h"

#include <xxhash.h>

#include <stdexcept>

#include "core/files.h"
#include "data/tokenizer/bpe.h"
#include "data/tokenizer/sentencepiece.h"

namespace strata::data {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path) {
  const std::string kind = file_kind(path);
  if (kind == "a directory") {
    const std::string json = path + "/tokenizer.json", vocab = path + "/vocab.json", merges = path + "/merges.txt";
    if (file_kind(json) == "a regular file") return std::make_unique<BpeTokenizer>(BpeTokenizer::from_tokenizer_json(json));
    if (file_kind(vocab) == "a regular file" && file_kind(merges) == "a regular file")
      return std::make_unique<BpeTokenizer>(BpeTokenizer::from_vocab_merges(vocab, merges));
    if (file_kind(path + "/tokenizer.model") == "a regular file") return open_sentencepiece(path + "/tokenizer.model");
    throw std::runtime_error("tokenizer " + path +
                             ": the directory holds no tokenizer.json, vocab.json + merges.txt or tokenizer.model");
  }
  require_regular_file(path, "tokenizer");
  if (ends_with(path, ".model")) return open_sentencepiece(path);
  if (ends_with(path, ".json")) return std::make_unique<BpeTokenizer>(BpeTokenizer::from_tokenizer_json(path));
  throw std::runtime_error("tokenizer " + path +
                           ": unknown kind of file (expected tokenizer.json, a directory with vocab.json + "
                           "merges.txt, or a SentencePiece .model)");
}

uint64_t tokenizer_hash(const Tokenizer& t) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (const std::string& f : t.files()) {
    const std::string bytes = read_regular_file(f, "tokenizer");
    XXH64_update(st, bytes.data(), bytes.size());
  }
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

}  // namespace strata::data
