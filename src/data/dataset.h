// Token sources and the distributed loader: the contract between data and training.
//
// A TokenSource is one stream of tokens (a synthetic corpus, a byte-level text file, or
// llm.c .bin shards treated as one stream). Samples are windows of T+1 tokens at a stride
// (non-overlapping by default: stride T; see sampler.h). The Loader hands each rank, per
// optimizer step, its micro-batches, and tells every rank the *global* number of real
// (weighted) target tokens of the step, computed from the deterministic plan with no
// communication, so gradients average by real tokens across ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;  // tokens
  virtual int vocab() const = 0;     // every token id is < vocab()
  // Copies tokens [pos, pos + n) into out.
  virtual void read(int64_t pos, int64_t n, int32_t* out) const = 0;
  // Human-readable identity ("synthetic markov seed=1", "data/x.bin (3 shards)"); also used
  // to check that a saved loader position belongs to this data.
  virtual std::string describe() const = 0;
  // True entropy of the stream in nats per token when known (synthetic corpus), else < 0.
  virtual double entropy_floor() const { return -1.0; }
  // True when tokens are the bytes of a text (a .txt file): samples are shown as text;
  // otherwise (the synthetic corpus, .bin shards) as token ids.
  virtual bool is_text() const { return false; }
  // Samples of seq + 1 tokens every `stride` tokens (default: windows of the stream).
  virtual int64_t num_samples(int64_t seq, int64_t stride) const;
  // True when the source orders its own samples each epoch (a mixture, data/mixture.h): the
  // loader then plans positions of the epoch unshuffled and read_sample() maps them.
  virtual bool orders_itself() const { return false; }
  // Sample `sample` (a position of epoch `epoch` when orders_itself()): seq + 1 tokens.
  virtual void read_sample(int64_t epoch, int64_t sample, int64_t seq, int64_t stride, int32_t* out) const {
    (void)epoch;
    read(sample * stride, seq + 1, out);
  }
  // Text of token ids when the source knows its tokenizer (a prepared directory), else "".
  virtual bool can_decode() const { return false; }
  // The token every document begins with, when the source knows it (a prepared directory's
  // manifest; a mixture whose parts agree), else -1.
  virtual int32_t document_token() const { return -1; }
  virtual std::string decode(const std::vector<int32_t>& /*ids*/) const { return ""; }
};

struct Split {
  std::unique_ptr<TokenSource> train, val;
};

// spec: "synthetic" | FILE.txt (bytes, vocab 256) | FILE.bin | DIR | GLOB (llm.c shards) |
// a prepared DIR (`strata data prepare`, data/prepared.h: its manifest's val/train shards, the
// shards checked against it, samples decoded with its tokenizer; vocab 0 = the tokenizer's).
// The validation split is the last val_fraction of the stream for files and an independent
// stream of the same process for the synthetic corpus. A directory or glob whose shard names
// contain "val" for some shards and not for others (llm.c's fineweb_val_* / fineweb_train_*)
// uses the "val" shards as the validation split instead. Throws naming the file and numbers.
// vocab: the model's vocabulary; every token is checked against it when the data is opened
// (an error names the file, token offset and value). 0 = the format's own: 256 for the
// synthetic corpus and text, 50257 (GPT-2) for uint16 .bin, 128256 (Llama 3) for uint32
// .bin. The sources' vocab() returns it.
// "synthetic:N" sets the size of the synthetic training stream to N tokens.
// "A:0.7,B:0.3" (two or more specs, each with a weight) mixes them (data/mixture.h).
Split open_split(const std::string& spec, uint64_t seed, double val_fraction = 0.05,
                 int vocab = 0);

enum class TailPolicy : uint8_t { drop, pad, uneven };
TailPolicy parse_tail_policy(const std::string& s);

struct SamplerConfig {
  int64_t seq = 256;       // T; each sample is T+1 tokens (inputs and shifted targets)
  int64_t stride = 0;      // tokens between sample starts; 0 = T (non-overlapping)
  int micro_batch = 1;     // b: samples per rank per micro-step
  int accum = 1;           // A: micro-steps per optimizer step
  int world = 1;           // W: data-parallel ranks; global batch = b * A * W
  uint64_t seed = 0;
  TailPolicy policy = TailPolicy::drop;
  bool shuffle = true;  // false: position p of every epoch holds sample p (a mixture orders itself)
  // >= 0: documents begin with this token (a prepared directory's document token) and each
  // micro-batch carries its rows' document starts (MicroBatch::doc_start, --doc-mask).
  int32_t doc_token = -1;
};

struct MicroBatch {
  int B = 0;  // rows present (<= micro_batch; may be 0 on some ranks under `uneven`)
  int T = 0;
  std::vector<int32_t> tokens, targets;  // (B, T)
  std::vector<float> weights;            // (B, T): 1 for real targets, 0 for padding
  std::vector<int64_t> sample_ids;       // (B): sample index, or -1 for a pad row
  int64_t real_tokens = 0;               // sum of weights
  // (B, T) with SamplerConfig::doc_token: position t's document begins at doc_start[t], the
  // last position at or before t whose input token is the document token (0 when none is);
  // else empty.
  std::vector<int32_t> doc_start;
};

// A micro-batch's document starts for the model (model/chunk.h MicroInput), or nullptr.
inline const int32_t* doc_starts(const MicroBatch& mb) {
  return mb.doc_start.empty() ? nullptr : mb.doc_start.data();
}

struct StepBatch {
  std::vector<MicroBatch> micro;   // A micro-batches for this rank
  int64_t global_real_tokens = 0;  // over all ranks and micro-batches of the step
  int64_t epoch = 0;
};

// Position of the loader: epoch and samples consumed globally within it. Independent of
// the number of ranks, so a run can resume on a different world size.
struct LoaderState {
  int64_t epoch = 0;
  int64_t consumed = 0;
  // Identity of the data the position belongs to, filled by Loader::state() and checked when
  // a Loader starts from it (-1 / 0: unknown, not checked): samples in the stream, and a hash
  // of the source's description, size, content sample, seq, stride and seed.
  int64_t samples = -1;
  uint64_t fingerprint = 0;
};

class Loader {
 public:
  // prefetch: steps prepared ahead by a background thread (0 = synchronous).
  Loader(const TokenSource& source, const SamplerConfig& cfg, int rank, LoaderState start = {},
         int prefetch = 2);
  ~Loader();
  StepBatch next();
  LoaderState state() const;  // position after the last batch returned by next()
  int64_t steps_per_epoch() const;
  // Seconds next() spent waiting for the prefetch thread (0 when loading keeps up).
  double wait_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::data
