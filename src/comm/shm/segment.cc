#include "comm/shm/segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/align.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm::shm {

// Defaults chosen with bench/comm (see docs/comm.md).
static constexpr size_t kDefaultSmall = 64 << 10;
static constexpr size_t kDefaultChunk = 256 << 10;
static constexpr int kDefaultDepth = 4;
static constexpr size_t kDefaultP2PSlot = 64 << 10;
static constexpr int kDefaultP2PSlots = 4;

static const EnvVar kSmallEnv("STRATA_SHM_SMALL_BYTES", "",
                              "shm: largest message of the one-phase flat path (default 65536)");
static const EnvVar kChunkEnv("STRATA_SHM_CHUNK_BYTES", "",
                              "shm: staging chunk of the pipelined paths (default 262144)");
static const EnvVar kDepthEnv("STRATA_SHM_DEPTH", "", "shm: staging chunks in flight per rank (default 4)");

// Options win, then the environment, then the defaults.
static size_t pick(size_t option, const EnvVar& env, size_t fallback) {
  if (option) return option;
  if (env.is_set()) {
    int64_t v = env.get_int();
    STRATA_CHECK(v > 0, env.name(), " must be positive, got ", v);
    return size_t(v);
  }
  return fallback;
}

Layout make_layout(int size, const Options& opt) {
  Layout l;
  l.size = uint32_t(size);
  l.small_bytes = round_up(pick(opt.small_max_bytes, kSmallEnv, kDefaultSmall), 64);
  l.chunk_bytes = round_up(std::max<size_t>(pick(opt.chunk_bytes, kChunkEnv, kDefaultChunk), 4096), 4096);
  l.depth = uint32_t(std::max<size_t>(2, pick(size_t(std::max(0, opt.pipeline_depth)), kDepthEnv, kDefaultDepth)));
  l.counts_bytes = round_up(uint64_t(size) * 8, 64);
  l.p2p_slot_bytes = round_up(std::max<size_t>(opt.p2p_slot_bytes ? opt.p2p_slot_bytes : kDefaultP2PSlot, 64), 64);
  l.p2p_slots = uint32_t(opt.p2p_slots >= 1 ? opt.p2p_slots : kDefaultP2PSlots);
  l.ctrl_off = round_up(sizeof(Header), 4096);
  l.small_off = 0;
  l.counts_off = round_up(2 * l.small_bytes, 64);
  l.slots_off = round_up(l.counts_off + 2 * l.counts_bytes, 4096);
  l.data_off = round_up(l.ctrl_off + uint64_t(size) * sizeof(RankCtrl), 4096);
  l.data_stride = round_up(l.slots_off + uint64_t(l.depth) * l.chunk_bytes, 4096);
  l.chan_off = l.data_off + uint64_t(size) * l.data_stride;
  l.chan_stride = round_up(sizeof(ChanCtrl) + l.p2p_slots * (sizeof(SlotHeader) + l.p2p_slot_bytes), 4096);
  l.total = l.chan_off + uint64_t(size) * size * l.chan_stride;
  return l;
}

std::string segment_name(const std::string& job, const std::string& group_id) {
  return "/strata-" + job + "-" + group_id;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    lay_ = o.lay_;
    name_ = std::move(o.name_);
    unlinked_ = o.unlinked_;
    o.base_ = nullptr;
    o.bytes_ = 0;
    o.unlinked_ = true;  // the name is this object's now
  }
  return *this;
}

Segment::~Segment() {
  unlink();
  if (base_) munmap(base_, bytes_);
}

namespace {
constexpr int kCleanupSignals[3] = {SIGTERM, SIGINT, SIGHUP};
char g_unlink_path[256];  // "/dev/shm/<name>": unlink(2) is async-signal-safe, shm_unlink is not listed

extern "C" void unlink_then_die(int sig) {
  if (g_unlink_path[0]) unlink(g_unlink_path);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

UnlinkOnSignal::UnlinkOnSignal(const Segment& seg) {
  std::string path = "/dev/shm" + seg.shm_name();
  if (path.size() >= sizeof g_unlink_path) return;
  std::memcpy(g_unlink_path, path.c_str(), path.size() + 1);
  for (int i = 0; i < 3; ++i) {
    struct sigaction old {};
    if (sigaction(kCleanupSignals[i], nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = unlink_then_die;
    sigemptyset(&sa.sa_mask);
    armed_[i] = sigaction(kCleanupSignals[i], &sa, nullptr) == 0;
  }
}

UnlinkOnSignal::~UnlinkOnSignal() {
  for (int i = 0; i < 3; ++i)
    if (armed_[i]) signal(kCleanupSignals[i], SIG_DFL);
  g_unlink_path[0] = 0;
}

void Segment::unlink() {
  if (!unlinked_ && !name_.empty()) shm_unlink(name_.c_str());
  unlinked_ = true;
}

static void copy_str(char* dst, size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(cap - 1, s.size()));
}

// A group of one rank has no one to share with: its segment is anonymous memory, with no
// name in /dev/shm and no file-size limit (RLIMIT_FSIZE applies to tmpfs objects) to hit.
static void* map_private(const std::string& shm_name, const Layout& layout) {
  void* p = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  STRATA_CHECK(p != MAP_FAILED, "cannot map memory for group segment ", shm_name, " (",
               layout.total, " bytes): ", std::strerror(errno));
  return p;
}

Segment Segment::create(const std::string& shm_name, const std::string& job,
                        const std::string& group, const Layout& layout) {
  if (layout.size == 1) {
    Segment s;
    s.base_ = static_cast<char*>(map_private(shm_name, layout));
    s.bytes_ = layout.total;
    s.lay_ = layout;
    s.name_ = shm_name;
    s.unlinked_ = true;  // never had a name
    s.init_header(job, group);
    return s;
  }
  shm_unlink(shm_name.c_str());  // a stale object of a crashed job with the same id
  // tmpfs pages are allocated on first touch; running out later would be a SIGBUS, so
  // refuse up front when the whole segment could not fit (Docker's default is 64 MiB).
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0 && fs.f_blocks > 0) {
    uint64_t avail = uint64_t(fs.f_bavail) * fs.f_frsize;
    STRATA_CHECK(avail >= layout.total, "not enough shared memory for group ", group, ": ",
                 layout.total >> 20, " MiB needed, ", avail >> 20,
                 " MiB free in /dev/shm (enlarge it, e.g. docker --shm-size, or shrink the "
                 "staging with comm::Options)");
  }
  int fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  STRATA_CHECK(fd >= 0, "cannot create shared-memory segment ", shm_name, ": ", std::strerror(errno));
  if (ftruncate(fd, off_t(layout.total)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(shm_name.c_str());
    fail("cannot size shared-memory segment ", shm_name, " to ", layout.total, " bytes: ",
         std::strerror(e));
  }
  void* p = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(shm_name.c_str());
    fail("cannot map shared-memory segment ", shm_name, ": ", std::strerror(errno));
  }
  Segment s;
  s.base_ = static_cast<char*>(p);
  s.bytes_ = layout.total;
  s.lay_ = layout;
  s.name_ = shm_name;
  s.init_header(job, group);
  return s;
}

void Segment::init_header(const std::string& job, const std::string& group) {
  Header& h = header();  // fresh pages are zero
  h.magic = kMagic;
  h.version = kVersion;
  h.layout = lay_;
  copy_str(h.job, sizeof h.job, job);
  copy_str(h.name, sizeof h.name, group);
  h.creator_pid = int32_t(getpid());
  h.abort_rank.store(-1);
  h.ready.store(1, std::memory_order_release);
}

Segment Segment::attach(const std::string& shm_name, const std::string& job, int size,
                        int64_t deadline_ns, int creator_rank) {
  int64_t sleep_us = 100;
  for (;;) {
    int fd = shm_open(shm_name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && size_t(st.st_size) >= sizeof(Header)) {
        size_t bytes = size_t(st.st_size);
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        STRATA_CHECK(p != MAP_FAILED, "cannot map shared-memory segment ", shm_name, ": ",
                     std::strerror(errno));
        Segment s;
        s.base_ = static_cast<char*>(p);
        s.bytes_ = bytes;
        s.name_ = shm_name;
        s.unlinked_ = true;  // attachers never unlink
        Header& h = s.header();
        if (h.ready.load(std::memory_order_acquire) == 1) {
          STRATA_CHECK(h.magic == kMagic && h.version == kVersion, "shared-memory segment ",
                       shm_name, " has an unknown format (magic/version mismatch)");
          s.lay_ = h.layout;
          STRATA_CHECK(int(s.lay_.size) == size && s.lay_.total <= bytes, "shared-memory segment ",
                       shm_name, " is for ", s.lay_.size, " ranks, this job has ", size);
          // A segment left by a crashed job with the same id: wait for the new creator.
          if (pid_alive(h.creator_pid) && std::string(h.job) == job) return s;
        }
      } else {
        close(fd);
      }
    }
    if (now_ns() > deadline_ns)
      throw TimeoutError(cat("timed out waiting for rank ", creator_rank,
                             " to create shared-memory segment ", shm_name,
                             " (is every rank of the job running with the same STRATA_JOB_ID?)"));
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min<int64_t>(sleep_us * 2, 20000);
  }
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts;
  ts.tv_sec = timeout_ns / 1000000000;
  ts.tv_nsec = timeout_ns % 1000000000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

bool pid_alive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno != ESRCH;
  // A zombie (dead, not yet reaped by its parent) still answers kill(pid, 0).
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* paren = std::strrchr(buf, ')');
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

}  // namespace strata::comm::shm
