// The in-memory checkpoint segment (ckpt/mem_slots.h): a committed slot reads back complete
// with its metadata; a slot whose writer stopped before the commit reads incomplete; a byte
// flipped after the commit fails the payload checksum; the other slot is untouched by all of
// it; a foreign object of the same name is refused in one line; remove_all takes a prefix.
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
  for (int s = 0; s < ckpt::kMemSlots; ++s) EXPECT_EQ(seg->inspect(s).state, MemSlotState::empty);

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

}  // namespace
}  // namespace strata::test
