// Client partitions and per-round client sampling: see partition.h.
#include "fed/partition.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/finite.h"
#include "core/rng.h"
#include "data/sampler.h"
#include "data/synthetic.h"

namespace strata::fed {
namespace {

constexpr uint64_t kPartitionStream = 0xFED0'0000'0000'0000ull;
constexpr uint64_t kSampleStream = 0xFED1'0000'0000'0000ull;

// Several streams read as one (the held-out data of a natural synthetic split).
class ConcatSource : public data::TokenSource {
 public:
  explicit ConcatSource(std::vector<std::unique_ptr<data::TokenSource>> parts)
      : parts_(std::move(parts)) {
    for (auto& p : parts_) starts_.push_back(size_ += p->size());
  }
  int64_t size() const override { return size_; }
  int vocab() const override { return parts_.front()->vocab(); }
  void read(int64_t pos, int64_t n, int32_t* out) const override {
    while (n > 0) {
      const size_t i = size_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin());
      STRATA_CHECK(i < parts_.size(), "held-out read at ", pos, " past ", size_, " tokens");
      const int64_t begin = starts_[i] - parts_[i]->size(), take = std::min(n, starts_[i] - pos);
      parts_[i]->read(pos - begin, take, out);
      pos += take, n -= take, out += take;
    }
  }
  std::string describe() const override {
    return cat(parts_.size(), " client chains' held-out streams, ", size_, " tokens");
  }

 private:
  std::vector<std::unique_ptr<data::TokenSource>> parts_;
  std::vector<int64_t> starts_;
  int64_t size_ = 0;
};

// Gamma(shape, 1) by Marsaglia and Tsang (2000), boosted for shape < 1.
double gamma_draw(Rng& rng, double shape) {
  if (shape < 1) {
    const double u = std::max(rng.uniform_double(), 1e-300);
    return gamma_draw(rng, shape + 1) * std::pow(u, 1 / shape);
  }
  const double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.uniform_double();
    if (std::log(std::max(u, 1e-300)) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

bool is_synthetic(const std::string& spec) {
  return spec == "synthetic" || spec.rfind("synthetic:", 0) == 0;
}

}  // namespace

PartitionSpec PartitionSpec::parse(const std::string& s) {
  PartitionSpec p;
  if (s == "iid") return p;
  if (s == "natural") {
    p.kind = natural;
    return p;
  }
  if (s.rfind("dirichlet:", 0) == 0) {
    const std::string a = s.substr(10);
    const std::string problem = number_problem(a, NumberRange::positive());
    STRATA_CHECK(problem.empty(), "--partition dirichlet:A needs A > 0 (", problem, ")");
    p.alpha = std::strtod(a.c_str(), nullptr);
    p.kind = dirichlet;
    return p;
  }
  fail("--partition must be iid, dirichlet:A or natural (got '", s, "')");
}

std::string PartitionSpec::describe() const {
  return kind == iid ? "iid" : kind == natural ? "natural" : cat("dirichlet:", alpha);
}

std::vector<std::vector<int64_t>> partition_windows(const PartitionSpec& part,
                                                    const std::vector<int>& labels, int clients,
                                                    uint64_t seed) {
  const int64_t n = int64_t(labels.size());
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  Rng rng(seed, kPartitionStream);
  if (part.kind != PartitionSpec::dirichlet) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
    if (part.kind == PartitionSpec::iid) shuffle(order, rng);  // natural: contiguous blocks
    for (int k = 0; k < clients; ++k)
      out[size_t(k)].assign(order.begin() + n * k / clients, order.begin() + n * (k + 1) / clients);
    return out;
  }
  std::map<int, std::vector<int64_t>> by_label;
  for (int64_t i = 0; i < n; ++i) by_label[labels[size_t(i)]].push_back(i);
  for (auto& [label, idx] : by_label) {
    shuffle(idx, rng);
    std::vector<double> p(static_cast<size_t>(clients));
    double total = 0;
    for (double& x : p) total += x = gamma_draw(rng, part.alpha);
    double acc = 0;
    int64_t begin = 0;
    for (int k = 0; k < clients; ++k) {
      acc += p[size_t(k)] / total;
      const int64_t end = k + 1 == clients ? int64_t(idx.size())
                                            : std::min<int64_t>(int64_t(idx.size()),
                                                                int64_t(std::llround(acc * double(idx.size()))));
      for (int64_t j = begin; j < end; ++j) out[size_t(k)].push_back(idx[size_t(j)]);
      begin = std::max(begin, end);
    }
  }
  for (int k = 0; k < clients; ++k) {
    STRATA_CHECK(!out[size_t(k)].empty(), "--partition ", part.describe(), " left client ", k,
                 " of ", clients, " with no samples (", n,
                 " samples in all): use a larger alpha, fewer --clients or more data");
    std::sort(out[size_t(k)].begin(), out[size_t(k)].end());
  }
  return out;
}

FedData open_fed_data(const std::string& spec, uint64_t seed, const PartitionSpec& part,
                      int clients, int client, int seq) {
  STRATA_CHECK(clients >= 1, "--clients must be at least 1 (got ", clients, ")");
  FedData d;
  if (part.kind == PartitionSpec::natural && is_synthetic(spec)) {
    // Each client its own chain; the stream size is the spec's, split K ways.
    data::Split whole = data::open_split(spec, seed);
    const int64_t per_client = whole.train->size() / clients;
    const int64_t val_per_client = std::max<int64_t>(whole.val->size() / clients, seq + 1);
    STRATA_CHECK(data::num_windows(per_client, seq, seq) >= 1, "--clients ", clients,
                 " is more than the data's shards: ", whole.train->size(), " tokens give each ",
                 per_client, " tokens, less than one sample of ", seq + 1);
    if (client >= 0)
      d.train = std::make_unique<data::SyntheticSource>(seed + 1 + uint64_t(client), false, per_client);
    std::vector<std::unique_ptr<data::TokenSource>> vals;
    if (client < 0)
      for (int k = 0; k < clients; ++k)
        vals.push_back(std::make_unique<data::SyntheticSource>(seed + 1 + uint64_t(k), true, val_per_client));
    if (client < 0) d.val = std::make_unique<ConcatSource>(std::move(vals));
    const int64_t w = data::num_windows(per_client, seq, seq);
    d.total_windows = w * clients;
    d.client_windows.assign(size_t(clients), w);
    if (client >= 0)
      for (int64_t i = 0; i < w; ++i) d.windows.push_back(i);
    return d;
  }
  data::Split split = data::open_split(spec, seed);
  const int64_t n = data::num_windows(split.train->size(), seq, seq);
  STRATA_CHECK(n >= clients, "--clients ", clients, " is more than the data's shards: ",
               split.train->size(), " tokens make ", n, " samples of ", seq + 1, " tokens");
  std::vector<int> labels(size_t(n), 0);
  if (part.kind == PartitionSpec::dirichlet)
    for (int64_t i = 0; i < n; ++i) split.train->read(i * seq, 1, &labels[size_t(i)]);
  auto shards = partition_windows(part, labels, clients, seed);
  d.total_windows = n;
  for (auto& s : shards) d.client_windows.push_back(int64_t(s.size()));
  if (client >= 0) d.windows = std::move(shards[size_t(client)]);
  d.train = std::move(split.train);
  d.val = std::move(split.val);
  return d;
}

std::vector<int> sample_clients(uint64_t seed, int64_t round, int clients, int per_round) {
  STRATA_CHECK(per_round >= 1 && per_round <= clients, "--per-round must be in [1, --clients = ",
               clients, "] (got ", per_round, ")");
  std::vector<int> all(static_cast<size_t>(clients));
  for (int k = 0; k < clients; ++k) all[size_t(k)] = k;
  Rng rng(seed, kSampleStream + uint64_t(round));
  for (int i = 0; i < per_round; ++i) std::swap(all[size_t(i)], all[size_t(i) + rng.below(uint64_t(clients - i))]);
  all.resize(size_t(per_round));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace strata::fed
