// The Loader: turns the sampler's step plans into this rank's token batches, optionally on a
// background thread that keeps up to `prefetch` steps ready in a bounded queue.
//
// Threading contract: one consumer thread calls next()/state(); the prefetch thread only
// reads the TokenSource (read() is const and thread-safe) and its own planning position.
// An exception on the prefetch thread is stored and rethrown by every later next().
// The destructor stops the thread and joins it, also when the queue is full.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace strata::data {

namespace {

// FNV-1a, for the data fingerprint.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void value(const T& v) { bytes(&v, sizeof v); }
};

// Identity of (data, windows, order): the size, 64 spread-out runs of 64 tokens, seq, stride
// and seed. Not the path, so moved or re-mounted data still resumes.
uint64_t fingerprint(const TokenSource& src, const SamplerConfig& cfg, int64_t stride) {
  Fnv f;
  f.value(src.size());
  f.value(cfg.seq);
  f.value(stride);
  f.value(cfg.seed);
  std::vector<int32_t> run(64);
  const int64_t size = src.size();
  for (int64_t i = 0; i < 64 && size > 0; ++i) {
    int64_t n = std::min<int64_t>(64, size);
    int64_t pos = (size - n) * i / 63;
    src.read(pos, n, run.data());
    f.bytes(run.data(), size_t(n) * sizeof(int32_t));
  }
  return f.h;
}

struct Item {
  StepBatch batch;
  LoaderState after;
  std::exception_ptr error;
};

}  // namespace

struct Loader::Impl {
  const TokenSource& src;
  SamplerConfig cfg;
  int rank;
  int64_t stride;
  uint64_t print;
  Sampler sampler;
  LoaderState produce_at;  // next step to build (prefetch thread once it runs)
  LoaderState current;     // after the last batch handed out
  double wait_s = 0;

  int depth;
  std::thread worker;
  std::mutex mu;
  std::condition_variable not_empty, not_full;
  std::deque<Item> queue;
  bool stop = false;

  Impl(const TokenSource& s, const SamplerConfig& c, int r, int64_t stride_, int prefetch)
      : src(s), cfg(c), rank(r), stride(stride_), print(fingerprint(s, c, stride_)),
        sampler(s.num_samples(c.seq, stride_), c), depth(prefetch) {}

  StepBatch build(LoaderState& at) const;
  void run();
};

StepBatch Loader::Impl::build(LoaderState& at) const {
  StepPlan plan = sampler.plan(at, rank);
  at = plan.after;
  const int T = int(cfg.seq);
  StepBatch sb;
  sb.epoch = plan.before.epoch;
  sb.global_real_tokens = plan.real_samples * cfg.seq;
  std::vector<int32_t> window(size_t(T) + 1);
  for (const auto& slots : plan.ranks[0].micro) {
    MicroBatch mb;
    mb.B = int(slots.size());
    mb.T = T;
    mb.tokens.resize(size_t(mb.B) * T);
    mb.targets.resize(size_t(mb.B) * T);
    mb.weights.resize(size_t(mb.B) * T);
    mb.sample_ids.resize(size_t(mb.B));
    for (int i = 0; i < mb.B; ++i) {
      const Slot& s = slots[size_t(i)];
      src.read_sample(plan.before.epoch, s.sample, T, stride, window.data());
      std::copy(window.begin(), window.end() - 1, mb.tokens.begin() + size_t(i) * T);
      std::copy(window.begin() + 1, window.end(), mb.targets.begin() + size_t(i) * T);
      std::fill_n(mb.weights.begin() + size_t(i) * T, T, s.pad ? 0.0f : 1.0f);
      mb.sample_ids[size_t(i)] = s.pad ? -1 : s.sample;
      mb.real_tokens += s.pad ? 0 : T;
    }
    if (cfg.doc_token >= 0) {
      mb.doc_start.resize(size_t(mb.B) * T);
      for (size_t r = 0; r < size_t(mb.B) * T; r += size_t(T)) {
        int32_t start = 0;
        for (int t = 0; t < T; ++t) {
          if (mb.tokens[r + size_t(t)] == cfg.doc_token) start = t;
          mb.doc_start[r + size_t(t)] = start;
        }
      }
    }
    sb.micro.push_back(std::move(mb));
  }
  return sb;
}

void Loader::Impl::run() {
  tracer().name_thread("data loader");
  LoaderState at = produce_at;
  for (;;) {
    Item item;
    try {
      item.batch = build(at);
      item.after = at;
    } catch (...) {
      item.error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu);
    not_full.wait(lock, [&] { return stop || int(queue.size()) < depth; });
    if (stop) return;
    bool failed = bool(item.error);
    queue.push_back(std::move(item));
    lock.unlock();
    not_empty.notify_one();
    if (failed) return;
  }
}

Loader::Loader(const TokenSource& source, const SamplerConfig& cfg_in, int rank,
               LoaderState start, int prefetch) {
  SamplerConfig cfg = cfg_in;
  STRATA_CHECK(cfg.seq > 0, "sequence length must be positive (got ", cfg.seq, ")");
  STRATA_CHECK(cfg.stride >= 0, "stride must be >= 0 (got ", cfg.stride, "; 0 = seq)");
  STRATA_CHECK(prefetch >= 0, "prefetch depth must be >= 0 (got ", prefetch, ")");
  const int64_t stride = cfg.stride > 0 ? cfg.stride : cfg.seq;
  if (source.orders_itself()) cfg.shuffle = false;  // a mixture shuffles within each part
  impl_ = std::make_unique<Impl>(source, cfg, rank, stride, prefetch);
  Impl& m = *impl_;
  STRATA_CHECK(rank >= 0 && rank < cfg.world, "rank ", rank, " outside world of ", cfg.world);
  const int64_t n = m.sampler.num_samples();
  STRATA_CHECK(n > 0, "data ", source.describe(), " has ", source.size(),
               " tokens: not one sample of seq + 1 = ", cfg.seq + 1, " tokens");
  STRATA_CHECK(m.sampler.steps_in_epoch() > 0, "global batch of ", m.sampler.global_batch(),
               " samples (micro-batch ", cfg.micro_batch, " x accumulation ", cfg.accum,
               " x world ", cfg.world, ") cannot be formed from the ", n, " samples of ",
               source.describe(), " under the drop policy (use a smaller batch, or pad/uneven)");
  if (start.samples >= 0 && start.samples != n)
    fail("saved loader position (epoch ", start.epoch, ", ", start.consumed, " samples consumed)",
         " belongs to data of ", start.samples, " samples, but ", source.describe(), " gives ", n,
         " samples of ", cfg.seq + 1, " tokens at stride ", stride);
  if (start.fingerprint != 0 && start.fingerprint != m.print)
    fail("saved loader position (epoch ", start.epoch, ", ", start.consumed, " samples consumed)",
         " belongs to different data or sampling: fingerprint ", start.fingerprint, " vs ",
         m.print, " for ", source.describe(), " (seq ", cfg.seq, ", stride ", stride, ", seed ",
         cfg.seed, ")");
  start.samples = n;
  start.fingerprint = m.print;
  m.current = m.sampler.normalize(start);
  m.produce_at = m.current;
  if (prefetch > 0) m.worker = std::thread([&m] { m.run(); });
}

Loader::~Loader() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->not_full.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

StepBatch Loader::next() {
  Impl& m = *impl_;
  if (m.depth == 0) {
    StepBatch sb = m.build(m.produce_at);
    m.current = m.produce_at;
    return sb;
  }
  Stopwatch wait;
  std::unique_lock<std::mutex> lock(m.mu);
  m.not_empty.wait(lock, [&] { return !m.queue.empty(); });
  m.wait_s += wait.seconds();
  Item& front = m.queue.front();
  if (front.error) std::rethrow_exception(front.error);  // stays queued: every call rethrows
  Item item = std::move(front);
  m.queue.pop_front();
  lock.unlock();
  m.not_full.notify_one();
  m.current = item.after;
  return std::move(item.batch);
}

LoaderState Loader::state() const { return impl_->current; }

int64_t Loader::steps_per_epoch() const { return impl_->sampler.steps_in_epoch(); }

double Loader::wait_seconds() const { return impl_->wait_s; }

}  // namespace strata::data
