#include "ckpt/mem_slots.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <algorithm>

#include "core/align.h"
#include "core/error.h"

namespace strata::ckpt {

namespace {

constexpr uint64_t kPage = 4096;

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint64_t capacity;  // payload bytes per slot
};

// One page. Fixed-size strings are NUL-terminated (longer values are cut: they are for
// comparison and messages; the fingerprint carries the layout exactly).
struct SlotHeader {
  std::atomic<uint64_t> commit;  // xxh64 of the fields below; 0: not committed
  int64_t step;                  // the copy's step, also while it is being written
  uint64_t bytes;
  uint64_t payload_hash;
  uint64_t layout;
  char job[64];
  char run[1024];
  char layout_text[1024];
};
static_assert(sizeof(SlotHeader) <= kPage, "a slot header fits its page");
constexpr size_t kHashedFrom = offsetof(SlotHeader, step);

uint64_t header_hash(const SlotHeader& h) {
  const uint64_t v = XXH64(reinterpret_cast<const char*>(&h) + kHashedFrom,
                           sizeof(SlotHeader) - kHashedFrom, kMemMagic);
  return v == 0 ? 1 : v;  // 0 means "not committed"
}

void copy_text(char* to, size_t cap, const std::string& from) {
  std::memset(to, 0, cap);
  std::memcpy(to, from.data(), std::min(from.size(), cap - 1));
}

std::string text_of(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

uint64_t slot_stride(uint64_t capacity) { return kPage + round_up(capacity, kPage); }

}  // namespace

std::string MemSegment::name_for(const std::string& run_key, int rank) {
  const uint64_t h = XXH64(run_key.data(), run_key.size(), 0);
  char buf[96];
  std::snprintf(buf, sizeof buf, "/strata-mem-%016llx-rank%d", (unsigned long long)h, rank);
  return buf;
}

uint64_t MemSegment::segment_bytes(uint64_t capacity, int slots) {
  return kPage + uint64_t(slots) * slot_stride(capacity);
}

MemSegment::MemSegment(std::string name, unsigned char* base, uint64_t bytes, uint64_t capacity, int slots)
    : name_(std::move(name)), base_(base), bytes_(bytes), capacity_(capacity), slots_(slots) {}

MemSegment::~MemSegment() { munmap(base_, bytes_); }

std::unique_ptr<MemSegment> MemSegment::open_existing(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    STRATA_CHECK(errno == ENOENT, "in-memory checkpoint /dev/shm", name, ": cannot open: ",
                 std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  fstat(fd, &st);
  const uint64_t size = uint64_t(st.st_size);
  if (size < kPage) {
    close(fd);
    fail("/dev/shm", name, " is ", size, " bytes, too small for an in-memory checkpoint");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  STRATA_CHECK(p != MAP_FAILED, "/dev/shm", name, ": mmap of ", size, " bytes failed: ",
               std::strerror(errno));
  const auto* h = static_cast<const SegmentHeader*>(p);
  const uint64_t capacity = h->capacity;
  const uint32_t slots = h->slots;
  if (h->magic != kMemMagic || h->version != kMemVersion) {
    munmap(p, size);
    fail("/dev/shm", name, " is not an in-memory checkpoint of this version (", size,
         " bytes; its magic or version does not match)");
  }
  if (slots < 2 || slots > uint32_t(kMaxMemSlots) || segment_bytes(capacity, int(slots)) != size) {
    munmap(p, size);
    fail("/dev/shm", name, " is an in-memory checkpoint of ", slots, " slot(s) of ", capacity,
         " bytes in ", size, " bytes; expected 2 or ", kMaxMemSlots, " slots filling it");
  }
  return std::unique_ptr<MemSegment>(
      new MemSegment(name, static_cast<unsigned char*>(p), size, capacity, int(slots)));
}

std::unique_ptr<MemSegment> MemSegment::create(const std::string& name, uint64_t capacity, int slots) {
  STRATA_CHECK(slots >= 2 && slots <= kMaxMemSlots, "in-memory checkpoint /dev/shm", name, ": ", slots,
               " slots asked, 2 or ", kMaxMemSlots, " supported");
  shm_unlink(name.c_str());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  STRATA_CHECK(fd >= 0, "in-memory checkpoint /dev/shm", name, ": cannot create: ",
               std::strerror(errno));
  const uint64_t size = segment_bytes(capacity, slots);
  // Reserve every page now: tmpfs pages are otherwise allocated on first touch, and a full
  // /dev/shm would kill the rank with SIGBUS in the middle of a copy.
  const int err = posix_fallocate(fd, 0, off_t(size));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    fail_setting("in-memory checkpoints need ", size, " bytes in /dev/shm", name, ": ",
                 std::strerror(err), " (lower ", setting("mem-ckpt-every"),
                 "'s cost with fewer ranks per host, or "
                 "turn it off with ",
                 setting("mem-ckpt-every"), " 0)");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    fail("/dev/shm", name, ": mmap of ", size, " bytes failed: ", std::strerror(errno));
  }
  auto* h = static_cast<SegmentHeader*>(p);
  h->magic = kMemMagic;
  h->version = kMemVersion;
  h->slots = uint32_t(slots);
  h->capacity = capacity;
  auto seg = std::unique_ptr<MemSegment>(
      new MemSegment(name, static_cast<unsigned char*>(p), size, capacity, slots));
  for (int slot = 0; slot < slots; ++slot) seg->clear(slot);
  return seg;
}

void MemSegment::remove(const std::string& name) { shm_unlink(name.c_str()); }

unsigned char* MemSegment::slot_base(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots_, "in-memory checkpoint slot ", slot, " of ", slots_, " in /dev/shm", name_);
  return base_ + kPage + uint64_t(slot) * slot_stride(capacity_);
}

const unsigned char* MemSegment::payload(int slot) const { return slot_base(slot) + kPage; }

MemSlotView MemSegment::inspect(int slot, bool check_payload) const {
  const auto* h = reinterpret_cast<const SlotHeader*>(slot_base(slot));
  MemSlotView v;
  const uint64_t commit = h->commit.load(std::memory_order_acquire);
  if (commit == 0) {
    v.state = h->step >= 0 ? MemSlotState::incomplete : MemSlotState::empty;
    v.meta.step = h->step;
    return v;
  }
  v.meta.step = h->step;
  if (commit != header_hash(*h)) {
    v.state = MemSlotState::corrupt;
    v.problem = "its header fails its checksum";
    return v;
  }
  v.meta.bytes = h->bytes;
  v.meta.layout = h->layout;
  v.meta.job = text_of(h->job, sizeof h->job);
  v.meta.run = text_of(h->run, sizeof h->run);
  v.meta.layout_text = text_of(h->layout_text, sizeof h->layout_text);
  if (h->bytes > capacity_) {
    v.state = MemSlotState::corrupt;
    v.problem = cat("it claims ", h->bytes, " bytes in a slot of ", capacity_);
    return v;
  }
  const uint64_t sum = check_payload ? XXH64(payload(slot), size_t(h->bytes), 0) : h->payload_hash;
  if (sum != h->payload_hash) {
    v.state = MemSlotState::corrupt;
    char buf[96];
    std::snprintf(buf, sizeof buf, "its payload checksum is %016llx, the header says %016llx",
                  (unsigned long long)sum, (unsigned long long)h->payload_hash);
    v.problem = buf;
    return v;
  }
  v.state = MemSlotState::complete;
  return v;
}

unsigned char* MemSegment::begin_write(int slot, int64_t step) {
  auto* h = reinterpret_cast<SlotHeader*>(slot_base(slot));
  h->commit.store(0, std::memory_order_release);
  h->step = step;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return slot_base(slot) + kPage;
}

void MemSegment::commit(int slot, const MemSlotMeta& meta) {
  STRATA_CHECK(meta.bytes <= capacity_, "in-memory copy of ", meta.bytes,
               " bytes does not fit its slot of ", capacity_);
  auto* h = reinterpret_cast<SlotHeader*>(slot_base(slot));
  h->payload_hash = XXH64(payload(slot), size_t(meta.bytes), 0);
  h->step = meta.step;
  h->bytes = meta.bytes;
  h->layout = meta.layout;
  copy_text(h->job, sizeof h->job, meta.job);
  copy_text(h->run, sizeof h->run, meta.run);
  copy_text(h->layout_text, sizeof h->layout_text, meta.layout_text);
  h->commit.store(header_hash(*h), std::memory_order_release);
}

void MemSegment::clear(int slot) {
  auto* h = reinterpret_cast<SlotHeader*>(slot_base(slot));
  h->commit.store(0, std::memory_order_release);
  h->step = -1;
}

void MemSegment::flip_byte(int slot, uint64_t at) {
  const auto* h = reinterpret_cast<const SlotHeader*>(slot_base(slot));
  STRATA_CHECK(h->bytes > 0, "in-memory copy in slot ", slot, " is empty: no byte to flip");
  slot_base(slot)[kPage + at % h->bytes] ^= 0x5a;
}

uint64_t MemSegment::payload_hash(int slot) const {
  const auto* h = reinterpret_cast<const SlotHeader*>(slot_base(slot));
  return h->commit.load(std::memory_order_acquire) == 0 ? 0 : h->payload_hash;
}

unsigned char* MemSegment::mutable_payload(int slot) { return slot_base(slot) + kPage; }

bool MemSegment::commit_received(int slot, const MemSlotMeta& meta, uint64_t sent_hash) {
  commit(slot, meta);
  if (payload_hash(slot) == sent_hash) return true;
  clear(slot);
  return false;
}

}  // namespace strata::ckpt
