// A prepared data directory (`strata data prepare`): llm.c .bin shards `val_NNNNNN.bin` and
// `train_NNNNNN.bin`, the tokenizer's files under tokenizer/, and manifest.json:
//
//   {"format": "strata.prepared.v1",
//    "tokenizer": {"kind": "bpe", "source": ..., "files": ["tokenizer/vocab.json", ...],
//                  "xxh64": "...", "vocab": 50257, "document_token": 50256},
//    "inputs": [...], "doc_split": "blank-line", "text_field": "text",
//    "split": {"val_tokens": 32768, "val_docs": 0},
//    "documents": N, "tokens": N, "bytes": N, "token_bits": 32,
//    "shards": [{"file": "val_000000.bin", "split": "val", "tokens": N, "documents": N,
//                "xxh64": "<hash of the shard's token bytes, after the header>"}, ...]}
//
// `documents` of a shard counts the document tokens in it (a document cut by the split or a
// shard boundary counts where it starts). `token_bits` is written only for shards of uint32
// tokens (llm.c's version 7, for a vocabulary past 65,536); without it the shards hold uint16
// tokens (version 1), so a 16-bit set is written byte for byte as before the key existed.
#pragma once
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace strata::data {

inline constexpr const char* kPreparedFormat = "strata.prepared.v1";

std::string hex64(uint64_t v);  // 16 lowercase hex digits
// Writes dir/manifest.json (core's atomic writer).
void write_manifest(const std::string& dir, const nlohmann::json& manifest);
// True when `dir` is a directory holding manifest.json.
bool is_prepared(const std::string& dir);
// Reads and checks dir/manifest.json's shape; throws naming the file and the key.
nlohmann::json read_manifest(const std::string& dir);
// The bytes per token of the manifest's shards: 2, or 4 with "token_bits": 32.
int manifest_token_bytes(const nlohmann::json& manifest);

// Token statistics of a prepared set, from one pass over its shards.
struct PreparedStats {
  int64_t tokens = 0, documents = 0, distinct_tokens = 0;
  int64_t doc_min = 0, doc_max = 0;  // tokens per document (those that start in the set)
  double doc_mean = 0, doc_median = 0;
};

// Checks every shard against the manifest: present, a valid .bin header, its token count and
// size; `deep` also hashes the tokens and counts documents. Throws one line naming the shard
// and what differs. With `stats`, fills it in the same pass (deep only).
void verify_prepared(const std::string& dir, const nlohmann::json& manifest, bool deep,
                     PreparedStats* stats = nullptr);

}  // namespace strata::data

namespace strata::data {

struct Split;
// The training and validation sources of a prepared directory: its "train" and "val" shards
// (no "val" shards: the last val_fraction of the training stream), checked against the
// manifest (not hashed), decoding with the tokenizer kept in the directory. vocab: the
// model's (0 = the tokenizer's); smaller than the tokenizer's is an error naming both.
Split open_prepared(const std::string& dir, double val_fraction, int vocab);

}  // namespace strata::data
