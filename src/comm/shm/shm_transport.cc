#include "comm/shm/shm_transport.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

#if defined(__x86_64__)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

namespace strata::comm::shm {

using detail::OpDesc;

static const EnvVar kSpinUs("STRATA_SHM_SPIN_US", "",
                            "microseconds an shm wait spins before sleeping (default: 50 when "
                            "the group has no more ranks than CPUs, else 2)");

static const EnvVar kSpinMinUs("STRATA_SHM_SPIN_MIN_US", "1",
                               "shm: microseconds the adaptive spin budget of a wait never "
                               "shrinks below (experiment knob)");
static const EnvVar kYieldAfterUs("STRATA_SHM_YIELD_AFTER_US", "1",
                                  "shm: microseconds a wait spins with `pause` before it yields "
                                  "the CPU between checks (experiment knob)");

// A spin knob in microseconds, as nanoseconds; throws naming the variable unless it is a
// whole number from 0 to 1 s.
static int spin_knob_ns(const EnvVar& v) {
  const int64_t us = v.get_int();
  STRATA_CHECK(us >= 0 && us <= 1'000'000, v.name(), "=", us,
               ": expected microseconds from 0 to 1000000");
  return int(us * 1000);
}

static const EnvVar kCma("STRATA_SHM_CMA", "0",
                         "shm: 1 lets all-gather and broadcast between processes copy straight "
                         "from peers' buffers with cross-memory attach (process_vm_readv) "
                         "instead of through the staging slots; pays where the kernel copy is "
                         "about as fast as memcpy");

// A value every process holds at a known address, read by peers to probe cross-memory attach.
static const uint64_t kProbeValue = 0x5354524154413031ull;

static int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

Range part_range(size_t n, int parts, int p, size_t elem_size) {
  size_t unit = std::max<size_t>(1, 64 / elem_size);
  size_t units = (n + unit - 1) / unit;
  size_t b = units * size_t(p) / size_t(parts), e = units * size_t(p + 1) / size_t(parts);
  return {std::min(n, b * unit), std::min(n, e * unit)};
}

// ---------------------------------------------------------------- setup

ShmTransport::ShmTransport(Segment seg, std::string job, std::string group, int rank,
                           const Options& opt)
    : seg_(std::move(seg)),
      job_(std::move(job)),
      group_(std::move(group)),
      rank_(rank),
      size_(int(seg_.layout().size)),
      opt_(opt),
      same_process_(false) {
  spin_ns_ = kSpinUs.is_set() ? spin_knob_ns(kSpinUs) : size_ <= available_cpus() ? 50'000 : 2'000;
  min_spin_ns_ = spin_knob_ns(kSpinMinUs);
  yield_after_ns_ = spin_knob_ns(kYieldAfterUs);
  coll_spin_ns_ = p2p_spin_ns_ = spin_ns_;
}

ShmTransport::~ShmTransport() = default;

std::unique_ptr<ShmTransport> ShmTransport::open(const std::string& job, const std::string& group,
                                                 const std::string& group_id, int rank, int size,
                                                 const Options& opt, int64_t deadline_ns) {
  std::string name = segment_name(job, group_id);
  Segment seg = rank == 0 ? Segment::create(name, job, group, make_layout(size, opt))
                          : Segment::attach(name, job, size, deadline_ns, 0);
  auto t = std::make_unique<ShmTransport>(std::move(seg), job, group, rank, opt);
  RankCtrl& c = t->seg_.ctrl(rank);
  STRATA_CHECK(c.state.load() == kRankAbsent, "rank ", rank, " of group ", group,
               " attached twice to ", name, " (two jobs with the same STRATA_JOB_ID?)");
  c.pid.store(int32_t(getpid()));
  c.probe_addr = reinterpret_cast<uint64_t>(&kProbeValue);
  c.state.store(kRankAttached, std::memory_order_release);
  t->seg_.header().attached.fetch_add(1);
  return t;
}

void ShmTransport::wait_attached(int64_t deadline_ns) {
  Header& h = seg_.header();
  std::optional<UnlinkOnSignal> cleanup;  // the creator owns the name until all attached
  if (rank_ == 0 && size_ > 1) cleanup.emplace(seg_);
  int64_t sleep_us = 20;
  while (int(h.attached.load(std::memory_order_acquire)) < size_) {
    if (now_ns() > deadline_ns) {
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (seg_.ctrl(r).state.load() == kRankAbsent) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw TimeoutError(cat("group ", group_, ": only ", h.attached.load(), " of ", size_,
                             " ranks joined before the timeout; missing rank(s) ", missing));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min<int64_t>(sleep_us * 2, 5000);
  }
  same_process_ = true;
  for (int r = 0; r < size_; ++r)
    if (seg_.ctrl(r).pid.load() != int32_t(getpid())) same_process_ = false;
  // Direct reads of peers' buffers: plain loads between threads; cross-memory attach
  // (process_vm_readv) between processes only when asked for and the kernel allows it
  // (ptrace rules). Off by default: measured 3-4x slower than memcpy on the reference
  // machine (docs/comm.md), which makes the staged two-copy paths faster.
  can_read_peers_ = same_process_ || kCma.get_bool();
  if (!same_process_)
    for (int r = 0; r < size_ && can_read_peers_; ++r) {
      if (r == rank_) continue;
      uint64_t got = 0;
      can_read_peers_ = read_peer(r, &got, seg_.ctrl(r).probe_addr, sizeof got) && got == kProbeValue;
    }
  STRATA_CHECK(int(h.attached.load()) == size_, "group ", group_, ": ", h.attached.load(),
               " ranks attached to a group of ", size_, " (two jobs with the same STRATA_JOB_ID?)");
  if (rank_ == 0) seg_.unlink();
}

bool ShmTransport::read_peer(int peer, void* dst, uint64_t src, size_t bytes) {
  if (same_process_) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return true;
  }
  pid_t pid = seg_.ctrl(peer).pid.load();
  auto* d = static_cast<char*>(dst);
  while (bytes) {
    struct iovec local {d, bytes}, remote {reinterpret_cast<void*>(src), bytes};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    d += n;
    src += uint64_t(n);
    bytes -= size_t(n);
  }
  return true;
}

bool OpCtx::all_can_read() const {
  for (int r = 0; r < size; ++r)
    if (!(desc(r).flags & kDescCanReadPeers)) return false;
  return true;
}

void OpCtx::read(int peer, void* dst, uint64_t src, size_t bytes) {
  if (!bytes) return;
  if (!t.read_peer(peer, dst, src, bytes))
    throw detail::PeerDeadError(cat(t.op_label(op), ": cannot read the buffer of rank ", peer, " (",
                                    std::strerror(errno), "); did it exit?"));
}

void ShmTransport::detach() {
  seg_.ctrl(rank_).state.store(kRankDetached, std::memory_order_release);
}

// ---------------------------------------------------------------- failures

std::string ShmTransport::op_label(const OpDesc& op) const {
  return cat("group ", group_, " ", op_name(op.op), " #", op.seq);
}

std::string ShmTransport::describe_peer(int peer) const {
  RankCtrl& c = seg_.ctrl(peer);
  uint32_t state = c.state.load();
  if (state == kRankDetached) return cat("rank ", peer, " has left the group");
  uint64_t seq = c.cur_seq.load();
  uint64_t arrived = c.arrive.load();
  if (arrived == 0 && c.in_op.load() == 0) return cat("rank ", peer, " has not started any collective");
  return cat("rank ", peer, c.in_op.load() ? " is inside " : " last finished ",
             op_name(OpType(c.cur_op.load())), " #", seq);
}

void ShmTransport::check_abort(const OpDesc& op) {
  Header& h = seg_.header();
  if (!h.abort_set.load(std::memory_order_acquire)) return;
  int by = h.abort_rank.load();
  std::string msg(h.abort_msg, strnlen(h.abort_msg, sizeof h.abort_msg));
  const char* reason = detail::abort_reason_name(h.abort_reason);
  if (by == rank_)
    throw detail::PeerAbortError(cat(op_label(op), ": group failed earlier: ", msg), reason);
  throw detail::PeerAbortError(cat(op_label(op), ": aborted because rank ", by, " reported: ", msg),
                               reason);
}

// A peer detaches (release) before its process exits, so a state read after its death was
// seen is final. The state read before the liveness check is not: a peer that detached and
// exited between the two reads would be called dead although it left cleanly (the end of a
// run whose ranks exit in any order).
static bool exited_cleanly(RankCtrl& c) {
  return c.state.load(std::memory_order_acquire) == kRankDetached;
}

void ShmTransport::check_peer(int peer, const OpDesc& op, const char* waiting) {
  RankCtrl& c = seg_.ctrl(peer);
  if (c.state.load(std::memory_order_acquire) == kRankDetached)
    throw detail::PeerDeadError(cat(op_label(op), ": peer rank ", peer,
                                    " left the group (its process exited) while this rank was ",
                                    waiting, " it"));
  if (same_process_) return;
  int pid = c.pid.load();
  if (!pid_alive(pid))
    throw detail::PeerDeadError(cat(op_label(op), ": peer rank ", peer, " (pid ", pid,
                                    exited_cleanly(c) ? ") left the group (its process exited)"
                                                      : ") died",
                                    " while this rank was ", waiting, " it"));
}

void ShmTransport::raise_abort(int reason_code, const std::string& message) {
  Header& h = seg_.header();
  int32_t expected = -1;
  if (!h.abort_rank.compare_exchange_strong(expected, rank_)) return;
  h.abort_reason = reason_code;
  std::memset(h.abort_msg, 0, sizeof h.abort_msg);
  std::memcpy(h.abort_msg, message.data(), std::min(sizeof h.abort_msg - 1, message.size()));
  h.abort_set.store(1, std::memory_order_release);
}

std::string ShmTransport::health(std::string& reason) {
  Header& h = seg_.header();
  if (h.abort_set.load(std::memory_order_acquire) && h.abort_rank.load() != rank_) {
    reason = detail::abort_reason_name(h.abort_reason);
    return cat("group ", group_, ": rank ", h.abort_rank.load(), " reported: ",
               std::string(h.abort_msg, strnlen(h.abort_msg, sizeof h.abort_msg)));
  }
  if (same_process_) return "";
  // Every peer found dead, not just the lowest: when a launcher stops the survivors of a
  // death, a rank may see a stopped peer as dead beside the one that died first.
  std::string dead;
  int first = -1;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || opt_.peer_may_die(p)) continue;  // its ops fail alone (types.h)
    RankCtrl& c = seg_.ctrl(p);
    if (c.state.load(std::memory_order_acquire) != kRankAttached) continue;
    int pid = c.pid.load();
    if (!pid_alive(pid) && !exited_cleanly(c)) {
      dead += cat(first < 0 ? "" : "; ", "rank ", p, " (pid ", pid, ") died");
      if (first < 0) first = p;
    }
  }
  if (first < 0) return "";
  reason = "peer-dead";
  return cat("group ", group_, ": ", dead, "; ", describe_peer(first));
}

// ---------------------------------------------------------------- waiting

// Spins with `pause` for ~1 us, then yields the CPU between checks until the budget runs
// out. The budget adapts: it halves whenever a wait had to sleep and doubles when the peer
// arrived while spinning, so on a loaded machine a rank soon stops burning the CPU its peer
// needs, while on an idle one hand-offs stay sub-microsecond.
template <typename Ready>
bool ShmTransport::spin_until(Ready ready, int64_t t0, int& budget_ns) {
  for (int i = 1;; ++i) {
    if (ready()) {
      budget_ns = std::min(spin_ns_, std::max(budget_ns * 2, min_spin_ns_));
      return true;
    }
    if ((i & 15) == 0) {
      int64_t spent = now_ns() - t0;
      if (spent > budget_ns) break;
      if (spent > yield_after_ns_) sched_yield();
    }
    cpu_relax();
  }
  budget_ns = std::max(min_spin_ns_, budget_ns / 2);
  return false;
}

void ShmTransport::wait_published(int peer, uint64_t target, const OpDesc& op) {
  std::atomic<uint64_t>& pub = seg_.ctrl(peer).desc[op.seq % kDescRing].published;
  RankCtrl& c = seg_.ctrl(peer);
  auto ready = [&] {
    return pub.load(std::memory_order_acquire) == op.seq + 1 ||
           c.arrive.load(std::memory_order_acquire) >= target;
  };
  if (ready() || spin_until(ready, now_ns(), coll_spin_ns_)) {
    // The counter may lag the descriptor by a few instructions; later phases wait on it.
    return;
  }
  wait_counter(peer, target, op);
}

void ShmTransport::wait_counter(int peer, uint64_t target, const OpDesc& op) {
  RankCtrl& c = seg_.ctrl(peer);
  if (c.arrive.load(std::memory_order_acquire) >= target) return;
  int64_t t0 = now_ns();
  if (spin_until([&] { return c.arrive.load(std::memory_order_acquire) >= target; }, t0,
                 coll_spin_ns_))
    return;
  int64_t last_check = now_ns();
  for (;;) {
    c.arrive_waiters.fetch_add(1, std::memory_order_seq_cst);
    uint64_t v = c.arrive.load(std::memory_order_seq_cst);
    if (v < target) {
      int64_t left = op.deadline_ns - now_ns();
      futex_wait(low_word(&c.arrive), uint32_t(v), std::clamp<int64_t>(left, 1000, 10'000'000));
    }
    c.arrive_waiters.fetch_sub(1, std::memory_order_relaxed);
    if (c.arrive.load(std::memory_order_acquire) >= target) return;
    int64_t now = now_ns();
    check_abort(op);
    if (now - last_check > 100'000'000) {
      last_check = now;
      check_peer(peer, op, "waiting for");
    }
    if (now > op.deadline_ns) {
      double waited = double(now - t0) * 1e-9;
      throw detail::PeerTimeoutError(cat(op_label(op), ": timed out waiting for rank ", peer, " (",
                                         describe_peer(peer), "; waited ", waited, " s)"),
                                     peer);
    }
  }
}

OpCtx::OpCtx(ShmTransport& tr, const OpDesc& o)
    : t(tr), op(o), seg(tr.segment()), rank(tr.rank()), size(tr.size()) {
  t.check_abort(op);
  RankCtrl& c = seg.ctrl(rank);
  base_ = c.arrive.load(std::memory_order_relaxed);
  c.cur_seq.store(op.seq, std::memory_order_relaxed);
  c.cur_op.store(uint32_t(op.op), std::memory_order_relaxed);
  c.in_op.store(1, std::memory_order_relaxed);
}

OpCtx::~OpCtx() { seg.ctrl(rank).in_op.store(0, std::memory_order_relaxed); }

void OpCtx::arrive() {
  RankCtrl& c = seg.ctrl(rank);
  c.arrive.fetch_add(1, std::memory_order_seq_cst);
  ++phase_;
  if (c.arrive_waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(low_word(&c.arrive));
}

void OpCtx::wait_rank(int r, uint64_t phase) { t.wait_counter(r, base_ + phase, op); }

void OpCtx::wait_all(uint64_t phase) {
  for (int i = 1; i < size; ++i) {
    int r = (rank + i) % size;
    if (phase == 1) t.wait_published(r, base_ + 1, op);
    else wait_rank(r, phase);
  }
}

const OpDescShm& OpCtx::desc(int r) const { return seg.ctrl(r).desc[op.seq % kDescRing]; }

static std::string describe_desc(const OpDescShm& d) {
  std::string s = cat(op_name(OpType(d.op)), " #", d.seq, " ", dtype_name(DType(d.dtype)));
  OpType op = OpType(d.op);
  if (op == OpType::allreduce || op == OpType::reduce || op == OpType::reduce_scatter)
    s += cat(" ", reduce_op_name(ReduceOp(d.redop)));
  s += cat(" count ", d.count);
  if (d.root >= 0) s += cat(" root ", d.root);
  return s;
}

void OpCtx::open(uint64_t extra, bool compare_extra, const void* inline_data,
                 size_t inline_bytes) {
  OpDescShm& mine = seg.ctrl(rank).desc[op.seq % kDescRing];
  if (inline_bytes) std::memcpy(mine.data, inline_data, inline_bytes);
  mine.seq = op.seq;
  mine.op = uint8_t(op.op);
  mine.dtype = uint8_t(op.dtype);
  mine.redop = uint8_t(op.redop);
  mine.flags = t.can_read_peers() ? kDescCanReadPeers : 0;
  mine.root = op.root;
  // Per-rank counts differ in uneven ops: compare totals (and the counts' hash).
  uint64_t total = 0;
  for (size_t x : op.counts) total += x;
  mine.count = op.op == OpType::alltoallv ? 0 : op.counts.empty() ? op.count : total;
  mine.counts_hash = extra;
  mine.published.store(op.seq + 1, std::memory_order_release);
  arrive();
  wait_all(1);
  bool same = true;
  for (int r = 0; r < size && same; ++r) {
    const OpDescShm& d = desc(r);
    same = d.seq == mine.seq && d.op == mine.op && d.dtype == mine.dtype && d.root == mine.root &&
           d.count == mine.count && (!compare_extra || d.counts_hash == mine.counts_hash);
    bool reducing = op.op == OpType::allreduce || op.op == OpType::reduce ||
                    op.op == OpType::reduce_scatter;
    if (reducing) same = same && d.redop == mine.redop;
  }
  if (same) return;
  std::string all;
  for (int r = 0; r < size; ++r)
    all += cat(r ? "; " : "", "rank ", r, ": ", describe_desc(desc(r)),
               compare_extra && desc(r).counts_hash != mine.counts_hash ? " (different counts)" : "");
  throw Error(cat("group ", t.group(), " #", op.seq, ": ranks called mismatched collectives: ", all));
}

// ---------------------------------------------------------------- dispatch

static size_t max_count(const std::vector<size_t>& v) {
  size_t m = 0;
  for (size_t x : v) m = std::max(m, x);
  return m;
}

static size_t sum_count(const std::vector<size_t>& v) {
  size_t m = 0;
  for (size_t x : v) m += x;
  return m;
}

// A group of one: every collective is a local copy.
static void run_alone(const OpDesc& op) {
  size_t es = dtype_size(op.dtype);
  auto copy = [&](size_t n) {
    if (op.recv && op.send && op.recv != op.send && n) std::memcpy(op.recv, op.send, n * es);
  };
  switch (op.op) {
    case OpType::allreduce:
    case OpType::reduce:
      copy(op.count);
      break;
    case OpType::reduce_scatter:
    case OpType::allgather:
    case OpType::allgatherv:
    case OpType::alltoall:
    case OpType::alltoallv:
      copy(op.counts.empty() ? 0 : op.counts[0]);
      break;
    default:
      break;
  }
}

static std::atomic<uint64_t> g_flat_runs{0}, g_other_runs{0};

AlgoRuns algo_runs() { return {g_flat_runs.load(), g_other_runs.load()}; }

// The staging bytes the one-phase flat algorithm of `op` needs (0: it has none).
static size_t flat_bytes(const OpDesc& op) {
  size_t es = dtype_size(op.dtype);
  switch (op.op) {
    case OpType::allreduce:
    case OpType::reduce:
    case OpType::broadcast: return op.count * es;
    case OpType::reduce_scatter: return sum_count(op.counts) * es;
    case OpType::allgather:
    case OpType::allgatherv: return max_count(op.counts) * es;
    default: return 0;
  }
}

// automatic: flat when the message fits the flat staging; pipelined: never flat; flat:
// always, and a message the staging cannot hold is an error (checked before the op touches
// the segment, on every rank alike) rather than a silent fall back to another algorithm.
bool ShmTransport::use_flat(const OpDesc& op) const {
  size_t bytes = flat_bytes(op), small = seg_.layout().small_bytes;
  if (opt_.algo == ShmAlgo::pipelined) return false;
  if (opt_.algo == ShmAlgo::flat)
    STRATA_CHECK(bytes <= small, "shm: ", op_name(op.op), " #", op.seq, " of group ", group_,
                 ": the flat algorithm was forced (comm::Options::algo) but the message of ", bytes,
                 " bytes exceeds the flat staging of ", small,
                 " bytes (raise STRATA_SHM_SMALL_BYTES or Options::small_max_bytes)");
  return bytes <= small;
}

void ShmTransport::run_collective(OpDesc& op) {
  if (size_ == 1) {
    check_abort(op);
    run_alone(op);
    return;
  }
  const bool flat = op.op != OpType::alltoall && op.op != OpType::alltoallv && op.op != OpType::barrier &&
                    use_flat(op);
  OpCtx c(*this, op);
  (flat ? g_flat_runs : g_other_runs).fetch_add(1, std::memory_order_relaxed);
  switch (op.op) {
    case OpType::allreduce:
      if (flat) allreduce_flat(c); else allreduce_pipelined(c, false);
      break;
    case OpType::reduce:
      if (flat) reduce_flat(c); else allreduce_pipelined(c, true);
      break;
    case OpType::reduce_scatter:
      if (flat) reduce_scatter_flat(c); else reduce_scatter_pipelined(c);
      break;
    case OpType::allgather:
    case OpType::allgatherv:
      if (flat) allgather_flat(c); else allgather_large(c);
      break;
    case OpType::broadcast:
      if (flat) broadcast_flat(c); else broadcast_large(c);
      break;
    case OpType::alltoall:
    case OpType::alltoallv:
      alltoall_run(c);
      break;
    case OpType::barrier:
      barrier_run(c);
      break;
    default:
      fail("shm backend: ", op_name(op.op), " is not a collective");
  }
}

// ---------------------------------------------------------------- split

static uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::unique_ptr<detail::Transport> ShmTransport::split(OpDesc& op,
                                                       const std::vector<int>& world_ranks,
                                                       std::vector<int>& world_ranks_out) {
  OpCtx c(*this, op);
  int64_t* mine = reinterpret_cast<int64_t*>(seg_.small(rank_, op.seq));
  mine[0] = op.color;
  mine[1] = op.key;
  c.open(0, false);
  struct Member {
    int64_t key;
    int rank;
  };
  std::vector<Member> members;
  for (int r = 0; r < size_; ++r) {
    const int64_t* v = reinterpret_cast<const int64_t*>(seg_.small(r, op.seq));
    if (v[0] == op.color && op.color >= 0) members.push_back({v[1], r});
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].rank == rank_) new_rank = int(i);
  char id[32];
  std::snprintf(id, sizeof id, "%016llx",
                (unsigned long long)fnv1a(cat(seg_.shm_name(), "/", op.seq, "/", op.color)));
  std::unique_ptr<ShmTransport> t;
  Options sub = opt_;
  sub.may_die.clear();  // numbered by this group's ranks
  if (new_rank == 0)
    t = ShmTransport::open(job_, op.split_name, id, 0, int(members.size()), sub, op.deadline_ns);
  c.arrive();  // phase 2: every new group's segment exists
  c.wait_all(2);
  if (new_rank > 0)
    t = ShmTransport::open(job_, op.split_name, id, new_rank, int(members.size()), sub,
                           op.deadline_ns);
  if (!t) return nullptr;
  t->wait_attached(op.deadline_ns);
  world_ranks_out.clear();
  for (const Member& m : members) world_ranks_out.push_back(world_ranks[size_t(m.rank)]);
  return t;
}

// ---------------------------------------------------------------- point-to-point

void ShmTransport::notify_peer_bell(int peer) {
  RankCtrl& c = seg_.ctrl(peer);
  c.bell.fetch_add(1, std::memory_order_seq_cst);
  if (c.bell_waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(&c.bell);
}

bool ShmTransport::p2p_progress(OpDesc& op, detail::P2PState& st) {
  check_abort(op);
  const Layout& L = seg_.layout();
  uint64_t total = op.count * dtype_size(op.dtype);
  if (op.op == OpType::send) {
    ChanCtrl& ch = seg_.chan(rank_, op.peer);
    uint64_t tail = ch.tail.load(std::memory_order_relaxed);
    uint64_t head = ch.head.load(std::memory_order_acquire);
    bool pushed = false;
    while ((st.done_bytes < total || !st.started) && tail - head < L.p2p_slots) {
      char* slot = seg_.chan_slot(rank_, op.peer, tail);
      auto* h = reinterpret_cast<SlotHeader*>(slot);
      uint64_t len = std::min<uint64_t>(L.p2p_slot_bytes, total - st.done_bytes);
      h->total_bytes = total;
      h->offset = st.done_bytes;
      h->len = len;
      h->tag = op.tag;
      if (len) std::memcpy(slot + sizeof(SlotHeader), static_cast<const char*>(op.send) + st.done_bytes, len);
      ch.tail.store(++tail, std::memory_order_release);
      st.done_bytes += len;
      st.started = pushed = true;
      if (tail - head >= L.p2p_slots) head = ch.head.load(std::memory_order_acquire);
    }
    if (pushed) notify_peer_bell(op.peer);
    return st.started && st.done_bytes == total;
  }
  ChanCtrl& ch = seg_.chan(op.peer, rank_);
  uint64_t head = ch.head.load(std::memory_order_relaxed);
  uint64_t tail = ch.tail.load(std::memory_order_acquire);
  bool freed = false;
  while (head < tail && !(st.started && st.done_bytes == total)) {
    char* slot = seg_.chan_slot(op.peer, rank_, head);
    auto* h = reinterpret_cast<const SlotHeader*>(slot);
    if (!st.started && (h->tag != op.tag || h->total_bytes != total || h->offset != 0))
      throw Error(cat("group ", group_, " recv #", op.seq, " from rank ", op.peer, ": expected tag ",
                      op.tag, " and ", total, " bytes, but the next message from rank ", op.peer,
                      " has tag ", h->tag, " and ", h->total_bytes, " bytes"));
    if (h->len) std::memcpy(static_cast<char*>(op.recv) + h->offset, slot + sizeof(SlotHeader), h->len);
    st.done_bytes += h->len;
    st.started = freed = true;
    ch.head.store(++head, std::memory_order_release);
  }
  if (freed) notify_peer_bell(op.peer);
  return st.started && st.done_bytes == total;
}

void ShmTransport::p2p_arm() { bell_armed_ = seg_.ctrl(rank_).bell.load(std::memory_order_acquire); }

void ShmTransport::p2p_wait(int64_t max_ns) {
  RankCtrl& c = seg_.ctrl(rank_);
  if (spin_until([&] { return c.bell.load(std::memory_order_acquire) != bell_armed_; }, now_ns(),
                 p2p_spin_ns_))
    return;
  c.bell_waiters.fetch_add(1, std::memory_order_seq_cst);
  if (c.bell.load(std::memory_order_seq_cst) == bell_armed_)
    futex_wait(&c.bell, bell_armed_, std::min<int64_t>(max_ns, 10'000'000));
  c.bell_waiters.fetch_sub(1, std::memory_order_relaxed);
}

void ShmTransport::p2p_wake() {
  RankCtrl& c = seg_.ctrl(rank_);
  c.bell.fetch_add(1, std::memory_order_seq_cst);
  if (c.bell_waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(&c.bell);
}

void ShmTransport::p2p_check_peer(const OpDesc& op) {
  check_abort(op);
  check_peer(op.peer, op, op.op == OpType::send ? "sending to" : "receiving from");
}

}  // namespace strata::comm::shm
