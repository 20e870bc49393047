#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/finite.h"
#include "data/sampler.h"

namespace strata::data {

constexpr int64_t kBlock = 4096;

MixtureSource::MixtureSource(std::vector<std::unique_ptr<TokenSource>> parts, std::vector<double> weights,
                             uint64_t seed)
    : parts_(std::move(parts)), weights_(std::move(weights)), seed_(seed) {
  STRATA_CHECK(parts_.size() >= 2 && parts_.size() == weights_.size() && parts_.size() <= 255,
               "a mixture needs 2 to 255 parts with one weight each");
  double sum = 0;
  for (double w : weights_) sum += w;
  for (double& w : weights_) w /= sum;
  for (const auto& p : parts_) {
    total_ += p->size();
    vocab_ = std::max(vocab_, p->vocab());
  }
}

void MixtureSource::read(int64_t pos, int64_t n, int32_t* out) const {
  for (const auto& p : parts_) {
    if (n == 0) return;
    if (pos >= p->size()) {
      pos -= p->size();
      continue;
    }
    const int64_t take = std::min(n, p->size() - pos);
    p->read(pos, take, out);
    out += take, n -= take, pos = 0;
  }
  STRATA_CHECK(n == 0, "read past the end of a mixture");
}

int32_t MixtureSource::document_token() const {
  const int32_t t = parts_[0]->document_token();
  for (const auto& p : parts_)
    if (p->document_token() != t) return -1;
  return t;
}

std::string MixtureSource::describe() const {
  std::ostringstream s;
  s << "mixture";
  for (size_t d = 0; d < parts_.size(); ++d) s << (d ? " + " : " ") << weights_[d] << " x (" << parts_[d]->describe() << ")";
  return s.str();
}

const MixtureSource::Schedule& MixtureSource::schedule(int64_t seq, int64_t stride) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : schedules_)
    if (s->seq == seq && s->stride == stride) return *s;
  auto s = std::make_unique<Schedule>();
  s->seq = seq, s->stride = stride;
  const size_t D = parts_.size();
  int64_t n = INT64_MAX;
  for (size_t d = 0; d < D; ++d) {
    s->samples.push_back(parts_[d]->num_samples(seq, stride));
    // A part's share can be 1e-40 of the whole: compare in double, then cast what fits.
    if (weights_[d] > 0) {
      const double fit = std::floor(double(s->samples[d]) / weights_[d]);
      if (fit < double(n)) n = int64_t(fit);
    }
  }
  s->positions = n;
  s->part.resize(size_t(n));
  std::vector<int64_t> c(D, 0);
  for (int64_t p = 0; p < n; ++p) {
    if (p % kBlock == 0) s->counts.insert(s->counts.end(), c.begin(), c.end());
    size_t best = 0;
    double best_err = -1e300;
    for (size_t d = 0; d < D; ++d) {
      const double err = weights_[d] * double(p + 1) - double(c[d]);
      if (weights_[d] > 0 && err > best_err) best = d, best_err = err;
    }
    s->part[size_t(p)] = uint8_t(best);
    ++c[best];
  }
  schedules_.push_back(std::move(s));
  return *schedules_.back();
}

int64_t MixtureSource::num_samples(int64_t seq, int64_t stride) const { return schedule(seq, stride).positions; }

void MixtureSource::read_sample(int64_t epoch, int64_t sample, int64_t seq, int64_t stride, int32_t* out) const {
  const Schedule& s = schedule(seq, stride);
  STRATA_CHECK(sample >= 0 && sample < s.positions, "mixture position ", sample, " outside [0, ", s.positions, ")");
  const size_t D = parts_.size(), d = s.part[size_t(sample)];
  const int64_t block = sample / kBlock;
  int64_t j = s.counts[size_t(block) * D + d];
  for (int64_t p = block * kBlock; p < sample; ++p) j += s.part[size_t(p)] == d;
  // Each part its own order per epoch, from the seed and the part's index.
  const EpochOrder order(seed_ ^ (0x9E3779B97F4A7C15ull * (d + 1)), epoch, s.samples[d]);
  parts_[d]->read_sample(epoch, order(j), seq, stride, out);
}

std::vector<std::pair<std::string, double>> parse_mixture(const std::string& spec) {
  std::vector<std::pair<std::string, double>> out;
  if (spec.find(',') == std::string::npos) return out;
  const std::vector<std::string> entries = split_fields(spec);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    STRATA_CHECK_SETTING(!entry.empty(), setting("data"), " ", spec, ": entry ", i + 1, " of ",
                         entries.size(), " is empty (a leading, trailing or doubled comma)");
    const size_t colon = entry.rfind(':');
    const std::string name = entry.substr(0, colon);
    STRATA_CHECK_SETTING(name != "synthetic" && name.rfind("synthetic:", 0) != 0, setting("data"),
                         " ", spec,
                         ": a mixture cannot hold the synthetic corpus (its tokens are no "
                         "tokenizer's); mix files or "
                         "prepared directories");
    STRATA_CHECK_SETTING(colon != std::string::npos && colon > 0, setting("data"), " ", spec,
                         ": mixture entry '", entry,
                         "' has no weight (expected SPEC:WEIGHT, e.g. data/a:0.7,data/b:0.3)");
    // A weight of 0 leaves the part out; the weights of a mixture are read as typed (core/finite.h),
    // each at most 3.4e38, so their sum over at most 255 parts stays finite.
    const std::string w = entry.substr(colon + 1);
    const std::string problem = number_problem(w, NumberRange::non_negative());
    STRATA_CHECK_SETTING(problem.empty(), setting("data"), " ", spec, ": weight '", w, "' of '",
                         name, "' must be a finite number >= 0 (", problem, ")");
    out.emplace_back(name, std::strtod(w.c_str(), nullptr));
  }
  STRATA_CHECK_SETTING(out.size() >= 2, setting("data"), " ", spec,
                       ": a mixture needs two or more entries");
  STRATA_CHECK_SETTING(out.size() <= 255, setting("data"), " ", spec,
                       ": a mixture holds at most 255 parts (got ", out.size(), ")");
  double sum = 0;
  for (const auto& part : out) sum += part.second;
  STRATA_CHECK_SETTING(sum > 0, setting("data"), " ", spec, ": the weights sum to 0");
  return out;
}

}  // namespace strata::data
