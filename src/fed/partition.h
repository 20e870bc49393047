// How the training data is split among K federated clients. A sample is a window of T+1
// tokens starting every T tokens of a stream (data/sampler.h's windows, stride T).
//
// Partitions (--partition):
//   iid           a seeded random permutation of the windows cut into K nearly equal parts.
//   dirichlet:A   non-IID by label (Hsu et al. 2019): a window's label is its first token (a
//                 byte); for each label, proportions p ~ Dirichlet(A, ..., A) over the K
//                 clients split that label's windows (in seeded random order). Small A gives
//                 each client few labels; large A approaches iid.
//   natural       the data's own heterogeneity. Synthetic corpus: client k draws its whole
//                 stream from its own Markov chain (seed + 1 + k), so clients differ in
//                 transition statistics, not only in what they happened to sample; the
//                 held-out set is the concatenation of every chain's validation stream.
//                 Text and token files: client k gets the k-th contiguous 1/K of the stream
//                 (a file's neighbouring text shares its document, author or section).
// Every process computes the same partition from (spec, seed, K) with no communication, and a
// client reads only its own windows.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace strata::fed {

struct PartitionSpec {
  enum Kind { iid, dirichlet, natural } kind = iid;
  double alpha = 0;  // dirichlet concentration
  // "iid" | "dirichlet:A" (A > 0) | "natural"; throws one line naming --partition otherwise.
  static PartitionSpec parse(const std::string& s);
  std::string describe() const;
};

// What one process sees: the stream its windows come from and, for the server, the held-out
// stream. Clients of a natural synthetic split each have their own stream.
struct FedData {
  std::unique_ptr<data::TokenSource> train;  // this client's stream (or the shared one)
  std::unique_ptr<data::TokenSource> val;    // held-out stream
  std::vector<int64_t> windows;              // this client's windows in `train` (empty: server)
  int64_t total_windows = 0;                 // over all clients
  std::vector<int64_t> client_windows;       // per client, for reports
};

// client in [0, K) opens its shard; client = -1 opens only the held-out data (the server).
// Throws when the data has fewer windows than clients ("more clients than data shards").
FedData open_fed_data(const std::string& spec, uint64_t seed, const PartitionSpec& part,
                      int clients, int client, int seq);

// The K shards as window lists (iid and dirichlet) over a stream of `n` windows with
// labels[i] the label of window i (used by dirichlet only).
std::vector<std::vector<int64_t>> partition_windows(const PartitionSpec& part,
                                                    const std::vector<int>& labels, int clients,
                                                    uint64_t seed);

// The C of K clients taking part in round r: a seeded sample without replacement, sorted.
std::vector<int> sample_clients(uint64_t seed, int64_t round, int clients, int per_round);

}  // namespace strata::fed
