// `strata data prepare`: a corpus (text files, folders, JSONL) tokenized into llm.c .bin
// shards plus a manifest, the form `strata train --data DIR` reads.
//
// Documents. A text file is one document (`file`), or is cut after every blank line
// (`blank-line`: after each "\n\n", scanning left to right, as llm.c's Tiny Shakespeare recipe
// does) or at every line (`line`); each line of a JSONL file (`.jsonl`) is one document, its
// `text_field`. Every document starts with the tokenizer's document token (tokenizer.h), so
// document boundaries stay in the shards. A directory contributes its regular files,
// recursively, in name order; inputs keep the order given.
//
// Split. The first `val_tokens` tokens of the stream (llm.c's recipe: 32,768), or the first
// `val_docs` documents, form the validation split (`val_*.bin`); the rest is `train_*.bin`.
// Neither: no validation shards.
//
// Output. Everything is written into `<out>.partial/` and renamed to `out` once complete
// (shards fsync'd, the manifest last), so an interrupted run leaves no directory that looks
// prepared; a stale `.partial` from a killed run is replaced. `out` must not exist.
//
// Cost. Documents are read in batches of about 8 MB and encoded on `threads` threads (one
// tokenizer each), then written in order: the output does not depend on the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace strata::data {

enum class DocSplit : uint8_t { file, blank_line, line };
DocSplit parse_doc_split(const std::string& s);  // throws naming the value

struct PrepareProgress {
  int64_t bytes_done = 0, bytes_total = 0, tokens = 0, documents = 0;
  double seconds = 0;
  bool last = false;
};

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string tokenizer;  // see open_tokenizer()
  std::string out;
  std::string text_field = "text";
  DocSplit doc_split = DocSplit::file;
  int64_t val_tokens = 0, val_docs = 0;  // at most one of them > 0
  int64_t shard_tokens = 100'000'000;
  int threads = 0;  // 0: the machine's cores
  std::function<void(const PrepareProgress&)> progress;  // called after every batch
};

// The files the inputs name, in order (a directory's regular files recursively, by name);
// throws naming a missing input, one that is not a file or directory, or an empty directory.
std::vector<std::string> corpus_files(const std::vector<std::string>& inputs);
// The staging of an output directory that must appear whole or not at all:
// require_new_output_dir throws unless `out` is absent (call it before any work);
// stage_output_dir checks again and creates this process's staging directory beside it
// (core/staged_dir.h: `<out>.partial-<host>-<pid>`; a killed run's is removed); commit_output_dir
// renames it to `out` once everything in it is written, and fails when another process
// created `out` meanwhile (of two concurrent runs to one output, the second is refused).
void require_new_output_dir(const std::string& out);
std::string stage_output_dir(const std::string& out);
void commit_output_dir(const std::string& staged, const std::string& out);
// Appends the documents of one file's text to `docs` (JSONL by its .jsonl name).
void split_documents(const std::string& path, const std::string& text, const std::string& text_field,
                     DocSplit doc_split, std::vector<std::string>& docs);

// Prepares the data set; returns its manifest. Throws one line naming the file (and line)
// of the first defect: a missing input, a JSONL line that is not an object with the text
// field, an empty corpus, `out` already present. The shards hold uint16 tokens, or uint32
// ones when the tokenizer's vocabulary is past 65,536 (token_file.h, prepared.h).
nlohmann::json prepare(const PrepareOptions& o);

}  // namespace strata::data
