// The in-memory checkpoint segment (ckpt/mem_slots.h): a committed slot reads back complete
// with its metadata; a slot whose writer stopped before the commit reads incomplete; a byte
// flipped after the commit fails the payload checksum; the other slot is untouched by all of
// it; a foreign object of the same name is refused in one line; remove_all takes a prefix.
// Segments of 2 and 3 slots read back with their own count; another count is one line.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ckpt/mem_slots.h"
#include "core/error.h"

namespace strata::test {
namespace {

using ckpt::MemSegment;
using ckpt::MemSlotMeta;
using ckpt::MemSlotState;

std::string unique_key(const char* tag) { return std::string(tag) + "-" + std::to_string(getpid()); }

void fill(MemSegment& seg, int slot, int64_t step, unsigned char value, uint64_t bytes) {
  unsigned char* p = seg.begin_write(slot, step);
  std::memset(p, value, bytes);
  MemSlotMeta m;
  m.job = "job-a";
  m.run = "/runs/a";
  m.layout = 0x1234;
  m.layout_text = "world 1";
  m.step = step;
  m.bytes = bytes;
  seg.commit(slot, m);
}

TEST(MemSlots, CommitIncompleteAndFlippedByte) {
  const std::string name = MemSegment::name_for(unique_key("slots"), 3);
  EXPECT_NE(name.find("-rank3"), std::string::npos) << name;
  auto seg = MemSegment::create(name, 10000);  // not a multiple of a page
  ASSERT_TRUE(seg);
  EXPECT_EQ(seg->capacity(), 10000u);
  EXPECT_EQ(seg->slots(), 2);
  for (int s = 0; s < seg->slots(); ++s) EXPECT_EQ(seg->inspect(s).state, MemSlotState::empty);

  fill(*seg, 0, 7, 0xab, 10000);
  ckpt::MemSlotView v = seg->inspect(0);
  ASSERT_EQ(v.state, MemSlotState::complete) << v.problem;
  EXPECT_EQ(v.meta.step, 7);
  EXPECT_EQ(v.meta.bytes, 10000u);
  EXPECT_EQ(v.meta.job, "job-a");
  EXPECT_EQ(v.meta.run, "/runs/a");
  EXPECT_EQ(v.meta.layout, 0x1234u);
  EXPECT_EQ(v.meta.layout_text, "world 1");
  EXPECT_EQ(seg->payload(0)[9999], 0xab);

  // A writer that dies between begin_write and commit: the slot says which step it was.
  unsigned char* p = seg->begin_write(1, 8);
  std::memset(p, 0xcd, 5000);
  v = seg->inspect(1);
  EXPECT_EQ(v.state, MemSlotState::incomplete);
  EXPECT_EQ(v.meta.step, 8);
  EXPECT_EQ(seg->inspect(0).state, MemSlotState::complete) << "the other slot is untouched";

  fill(*seg, 1, 8, 0xcd, 4096);
  EXPECT_EQ(seg->inspect(1).state, MemSlotState::complete);
  seg->flip_byte(1, 100);
  v = seg->inspect(1);
  EXPECT_EQ(v.state, MemSlotState::corrupt);
  EXPECT_NE(v.problem.find("payload checksum"), std::string::npos) << v.problem;
  EXPECT_EQ(seg->inspect(0).state, MemSlotState::complete);

  // Mapped again (a restarted process): the same states.
  seg.reset();
  auto again = MemSegment::open_existing(name);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->inspect(0).state, MemSlotState::complete);
  EXPECT_EQ(again->inspect(1).state, MemSlotState::corrupt);
  again->clear(0);
  EXPECT_EQ(again->inspect(0).state, MemSlotState::empty);
  MemSegment::remove(name);
  EXPECT_EQ(MemSegment::open_existing(name), nullptr);
}

TEST(MemSlots, OversizedCommitAndForeignObjectsAreOneLine) {
  const std::string name = MemSegment::name_for(unique_key("foreign"), 0);
  auto seg = MemSegment::create(name, 4096);
  seg->begin_write(0, 1);
  MemSlotMeta m;
  m.step = 1;
  m.bytes = 4097;
  try {
    seg->commit(0, m);
    FAIL() << "a copy larger than its slot must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4097 bytes does not fit its slot of 4096"),
              std::string::npos)
        << e.what();
  }
  seg.reset();
  MemSegment::remove(name);

  // An object of the name that is not a segment (another program's, or a torn create).
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  close(fd);
  try {
    MemSegment::open_existing(name);
    FAIL() << "a foreign object must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not an in-memory checkpoint of this version"),
              std::string::npos)
        << e.what();
  }
  // create() replaces it.
  EXPECT_EQ(MemSegment::create(name, 4096)->inspect(0).state, MemSlotState::empty);
  MemSegment::remove(name);
  EXPECT_EQ(MemSegment::open_existing(name), nullptr);
}

// Three slots (live recovery, replicas): each holds its own step, a reader maps it with its
// count; a 2-slot segment beside it still reads as 2 slots; a slot past the count and a count
// other than 2 or 3 are one line each.
TEST(MemSlots, TwoAndThreeSlotSegmentsReadBackWithTheirCount) {
  const std::string three = MemSegment::name_for(unique_key("three"), 0);
  const std::string two = MemSegment::name_for(unique_key("three"), 1);
  auto a = MemSegment::create(three, 5000, 3);
  auto b = MemSegment::create(two, 5000);
  EXPECT_EQ(MemSegment::segment_bytes(5000, 3) - MemSegment::segment_bytes(5000, 2), 4096u + 8192u);
  for (int s = 0; s < 3; ++s) fill(*a, s, 10 + s, static_cast<unsigned char>(s + 1), 5000);
  fill(*b, 1, 4, 0x77, 5000);
  a.reset();
  b.reset();
  auto ra = MemSegment::open_existing(three);
  auto rb = MemSegment::open_existing(two);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->slots(), 3);
  EXPECT_EQ(rb->slots(), 2);
  for (int s = 0; s < 3; ++s) {
    const ckpt::MemSlotView v = ra->inspect(s);
    ASSERT_EQ(v.state, MemSlotState::complete) << v.problem;
    EXPECT_EQ(v.meta.step, 10 + s);
    EXPECT_EQ(ra->payload(s)[4999], s + 1);
  }
  EXPECT_EQ(rb->inspect(0).state, MemSlotState::empty);
  EXPECT_EQ(rb->inspect(1).meta.step, 4);
  try {
    rb->inspect(2);
    FAIL() << "slot 2 of a 2-slot segment must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 2 of 2 in /dev/shm" + two), std::string::npos) << e.what();
  }
  try {
    MemSegment::create(MemSegment::name_for(unique_key("four"), 0), 4096, 4);
    FAIL() << "4 slots must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 slots asked, 2 or 3 supported"), std::string::npos) << e.what();
  }
  ra.reset();
  // A header claiming 4 slots (a newer format, or damage): one line naming the count.
  {
    const int fd = shm_open(three.c_str(), O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    static_cast<uint32_t*>(p)[3] = 4;  // after the 8-byte magic and the version
    munmap(p, 4096);
  }
  try {
    MemSegment::open_existing(three);
    FAIL() << "a 4-slot header must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is an in-memory checkpoint of 4 slot(s) of 5000 bytes"), std::string::npos)
        << e.what();
  }
  MemSegment::remove(three);
  MemSegment::remove(two);
}

}  // namespace
}  // namespace strata::test
