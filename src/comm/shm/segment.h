// The shared-memory segment of one shm group: a POSIX shm object "/strata-<job>-<group id>",
// mode 0600, created by the group's rank 0 and unlinked as soon as every member has mapped
// it (so a crash leaves nothing behind; the launcher also removes "/strata-<job>-*").
//
// Layout (all offsets 4 KiB aligned; format checked through magic + version on attach):
//   Header                  magic, version, layout, job, abort record, attach count
//   RankCtrl[size]          per rank: arrival counter (futex), p2p doorbell (futex), pid,
//                           state, current op, ring of the last 4 op descriptors
//   rank data[size]         per rank: small staging x2 (parity of the sequence number),
//                           counts x2 (alltoallv), `depth` pipelined staging slots
//   channels[size*size]     per directed pair i->j: head/tail counters + slots (send/recv)
//
// Synchronisation: each rank only writes its own RankCtrl and data area; peers read them.
// Progress is a monotonic arrival counter per rank: a rank that finished phase k of the
// current op has arrive >= base + k, and every rank runs the same phases for the same op,
// so all counters agree between ops.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/types.h"

namespace strata::comm::shm {

inline constexpr uint64_t kMagic = 0x3153484d41525453ull;  // "STRAMHS1"
inline constexpr uint32_t kVersion = 2;
inline constexpr int kDescRing = 4;

struct Layout {
  uint32_t size = 0;
  uint32_t depth = 0;
  uint64_t small_bytes = 0;  // per parity
  uint64_t chunk_bytes = 0;  // per pipelined slot
  uint64_t counts_bytes = 0;  // per parity
  uint64_t p2p_slot_bytes = 0;
  uint32_t p2p_slots = 0;
  uint32_t pad = 0;
  uint64_t ctrl_off = 0, data_off = 0, data_stride = 0;
  uint64_t small_off = 0, counts_off = 0, slots_off = 0;  // within a rank's data area
  uint64_t chan_off = 0, chan_stride = 0, total = 0;
};
Layout make_layout(int size, const Options& opt);

// One collective's identity as every rank publishes it (for mismatch detection), in one
// cache line with up to kInlineBytes of payload: a tiny all-reduce moves one line per rank.
// `published` (seq + 1) is stored last, with release.
inline constexpr size_t kInlineBytes = 16;
enum : uint8_t { kDescCanReadPeers = 1 };  // OpDescShm::flags

struct alignas(64) OpDescShm {
  uint64_t seq;
  uint8_t op, dtype, redop;
  uint8_t flags;  // kDescCanReadPeers: this rank can read every peer's memory directly
  int32_t root;
  uint64_t count;
  uint64_t counts_hash;  // allgatherv / reduce_scatter_v counts; alltoallv: max block
  unsigned char data[kInlineBytes];
  std::atomic<uint64_t> published;
};
static_assert(sizeof(OpDescShm) == 64, "one cache line");

enum : uint32_t { kRankAbsent = 0, kRankAttached = 1, kRankDetached = 2 };

struct alignas(64) RankCtrl {
  std::atomic<uint64_t> arrive;  // low 32 bits are the futex word
  std::atomic<uint32_t> arrive_waiters;
  char pad0[52];
  std::atomic<uint32_t> bell;  // p2p doorbell (futex word)
  std::atomic<uint32_t> bell_waiters;
  char pad1[56];
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> state;
  std::atomic<uint64_t> cur_seq;  // last collective opened
  std::atomic<uint32_t> in_op;    // 1 while inside cur_seq
  std::atomic<uint32_t> cur_op;
  uint64_t probe_addr;  // address of a known value in this process (cross-memory-attach probe)
  char pad2[32];
  OpDescShm desc[kDescRing];
};

struct alignas(64) Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> ready;  // set last by the creator
  Layout layout;
  char job[128];
  char name[128];
  int32_t creator_pid;
  std::atomic<uint32_t> attached;
  std::atomic<int32_t> abort_rank;  // -1: none
  std::atomic<uint32_t> abort_set;  // 1 once the message below is complete
  int32_t abort_reason;             // 1 timeout, 2 peer-dead, 3 error
  char abort_msg[480];
};

struct alignas(64) ChanCtrl {
  std::atomic<uint64_t> tail;  // written by the sender
  char pad0[56];
  std::atomic<uint64_t> head;  // written by the receiver
  char pad1[56];
};

struct alignas(64) SlotHeader {
  uint64_t total_bytes;
  uint64_t offset;
  uint64_t len;
  int32_t tag;
  int32_t pad;
};

// A mapped segment. Not copyable; unmaps on destruction.
class Segment {
 public:
  // Creates (rank 0) the object, replacing a stale one of the same name; a group of one
  // rank gets anonymous memory instead (nothing attaches to it).
  static Segment create(const std::string& shm_name, const std::string& job,
                        const std::string& group, const Layout& layout);
  // Attaches to an object created by a live creator, retrying until deadline_ns.
  static Segment attach(const std::string& shm_name, const std::string& job, int size,
                        int64_t deadline_ns, int creator_rank_for_errors);
  Segment() = default;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  // Unmaps; the creator also removes the name if it still holds it (a group that never
  // formed: a timeout or an error while waiting for the others must not leave it behind).
  ~Segment();

  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  const Layout& layout() const { return lay_; }
  RankCtrl& ctrl(int r) const {
    return reinterpret_cast<RankCtrl*>(base_ + layout().ctrl_off)[r];
  }
  char* data(int r) const { return base_ + layout().data_off + uint64_t(r) * layout().data_stride; }
  char* small(int r, uint64_t seq) const {
    return data(r) + layout().small_off + (seq & 1) * layout().small_bytes;
  }
  uint64_t* counts(int r, uint64_t seq) const {
    return reinterpret_cast<uint64_t*>(data(r) + layout().counts_off +
                                       (seq & 1) * layout().counts_bytes);
  }
  char* slot(int r, uint64_t k) const {
    return data(r) + layout().slots_off + (k % layout().depth) * layout().chunk_bytes;
  }
  ChanCtrl& chan(int from, int to) const {
    return *reinterpret_cast<ChanCtrl*>(chan_base(from, to));
  }
  char* chan_slot(int from, int to, uint64_t i) const {
    return chan_base(from, to) + sizeof(ChanCtrl) +
           (i % layout().p2p_slots) * (sizeof(SlotHeader) + layout().p2p_slot_bytes);
  }
  const std::string& shm_name() const { return name_; }
  void unlink();  // removes the name (mapping stays valid)

 private:
  void init_header(const std::string& job, const std::string& group);
  char* chan_base(int from, int to) const {
    return base_ + layout().chan_off + (uint64_t(from) * layout().size + to) * layout().chan_stride;
  }
  char* base_ = nullptr;
  size_t bytes_ = 0;
  Layout lay_;
  std::string name_;
  bool unlinked_ = false;
};

// While alive, SIGTERM, SIGINT and SIGHUP (where their disposition is the default, which
// would end the process without running destructors) first remove the segment's name, then
// end the process as the default would. For the creator's wait for the other ranks: the
// only time a named segment exists that no one else would remove.
class UnlinkOnSignal {
 public:
  explicit UnlinkOnSignal(const Segment& seg);
  ~UnlinkOnSignal();
  UnlinkOnSignal(const UnlinkOnSignal&) = delete;
  UnlinkOnSignal& operator=(const UnlinkOnSignal&) = delete;

 private:
  bool armed_[3] = {};
};

// Futex on a 32-bit word in shared memory (process-shared, not FUTEX_PRIVATE).
void futex_wake_all(std::atomic<uint32_t>* word);
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
inline std::atomic<uint32_t>* low_word(std::atomic<uint64_t>* w) {
  return reinterpret_cast<std::atomic<uint32_t>*>(w);  // little-endian: low half first
}

// True unless the process is known to be gone (ESRCH).
bool pid_alive(int pid);

// Name of the shm object for a group of a job ("/strata-<job>-<id>").
std::string segment_name(const std::string& job, const std::string& group_id);

}  // namespace strata::comm::shm
