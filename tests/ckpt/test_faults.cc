// Damaged checkpoints, bad disks and crashes: detected, reported, fallen back from, and the
// last good checkpoint never touched.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstring>
#include <fstream>
#include <random>

#include "ckpt/shard_file.h"
#include "helpers.h"

using namespace ckpt_test;

namespace {

constexpr int64_t kPsi = 2000;

// Two good checkpoints (steps 10 and 20) written by 2 ranks at stage 1.
void two_checkpoints(const std::string& run) {
  save_step(run, FullStates(kPsi, 10, false), 10, 2, 1);
  save_step(run, FullStates(kPsi, 20, false), 20, 2, 1);
}

std::string step_dir(const std::string& run, int64_t step) {
  return run + "/ckpt/" + step_dir_name(step);
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c = char(c ^ 0x5a);
  f.seekp(offset);
  f.write(&c, 1);
}

// Loads with fallback and expects step 10, with one log line naming `needle`.
void expect_fallback_to_10(const std::string& run, const std::string& needle) {
  std::vector<std::string> log;
  LoadResult r = load_and_check_full(run, 10, false, kPsi, &log);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find(needle), std::string::npos) << r.skipped[0];
  bool logged = false;
  for (const std::string& l : log) logged |= l.find(needle) != std::string::npos;
  EXPECT_TRUE(logged) << "no log line mentions " << needle;
}

}  // namespace

TEST(CkptFaults, FlippedByteFallsBackToPrevious) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  flip_byte(step_dir(tmp.str(), 20) + "/shard-00001-of-00002.bin", 64 + 300);
  expect_fallback_to_10(tmp.str(), "shard-00001-of-00002.bin: checksum mismatch");
}

TEST(CkptFaults, TruncatedShardFallsBack) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  const std::string shard = step_dir(tmp.str(), 20) + "/shard-00000-of-00002.bin";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  expect_fallback_to_10(tmp.str(), "truncated shard");
}

TEST(CkptFaults, MissingShardFallsBack) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  fs::remove(step_dir(tmp.str(), 20) + "/shard-00001-of-00002.bin");
  expect_fallback_to_10(tmp.str(), "missing shard");
}

TEST(CkptFaults, MissingManifestFallsBack) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  fs::remove(step_dir(tmp.str(), 20) + "/manifest.json");
  expect_fallback_to_10(tmp.str(), "missing manifest");
}

TEST(CkptFaults, WrongMagicFallsBack) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  flip_byte(step_dir(tmp.str(), 20) + "/shard-00000-of-00002.bin", 0);
  expect_fallback_to_10(tmp.str(), "wrong magic");
}

TEST(CkptFaults, ManifestThatDoesNotMatchItsFilesFallsBack) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  const std::string path = step_dir(tmp.str(), 20) + "/manifest.json";
  nlohmann::json j;
  std::ifstream(path) >> j;
  j["shards"][1]["rank"] = 5;  // the file's header says rank 1
  std::ofstream(path) << j.dump();
  expect_fallback_to_10(tmp.str(), "manifest says");
  // Chunks that no longer tile their tensor are caught when the manifest is read.
  TempDir tmp2;
  two_checkpoints(tmp2.str());
  const std::string p2 = step_dir(tmp2.str(), 20) + "/manifest.json";
  std::ifstream(p2) >> j;
  j["shards"][1]["pieces"][0]["flat"][0] = j["shards"][1]["pieces"][0]["flat"][0].get<int64_t>() + 1;
  std::ofstream(p2) << j.dump();
  std::vector<std::string> log;
  LoadResult r = load_and_check_full(tmp2.str(), 10, false, kPsi, &log);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("manifest.json"), std::string::npos) << r.skipped[0];
}

TEST(CkptFaults, LatestPointerMissingOrDangling) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  fs::remove(tmp.str() + "/ckpt/latest");
  std::vector<std::string> log;
  load_and_check_full(tmp.str(), 20, false, kPsi, &log);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log[0].find("latest: missing"), std::string::npos) << log[0];
  // A pointer naming a directory that is gone: report it, use the one before.
  atomic_write_file(tmp.str() + "/ckpt/latest", "step-000030\n");
  log.clear();
  load_and_check_full(tmp.str(), 20, false, kPsi, &log);
  EXPECT_NE(log[0].find("step-000030: missing"), std::string::npos) << log[0];
  // Nothing at all: nullopt (a fresh run), not an error.
  TempDir empty;
  std::vector<float> p(4);
  EXPECT_FALSE(load_latest(empty.str(), {{"params", DType::f32, {0, 4}, p.data(), {}}}).has_value());
}

// A FIFO in place of a shard or the manifest is refused by its type, never opened (open(2) of a
// FIFO with no writer blocks forever): the load falls back instead of hanging.
TEST(CkptFaults, FifoInPlaceOfAFileFallsBack) {
  for (const char* file : {"shard-00001-of-00002.bin", "manifest.json"}) {
    TempDir tmp;
    two_checkpoints(tmp.str());
    const std::string path = step_dir(tmp.str(), 20) + "/" + file;
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << std::strerror(errno);
    expect_fallback_to_10(tmp.str(), std::string(file) + ": is a FIFO");
  }
}

// Random bytes in `latest`: loading tries every checkpoint newest first with a note that names
// the file without echoing the bytes (the note goes into JSON records), and the next save
// replaces the pointer instead of failing on it.
TEST(CkptFaults, MalformedLatestPointerIsReplacedByTheNextSave) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  const std::string latest = tmp.str() + "/ckpt/latest";
  std::string junk;
  std::mt19937 rng(25);
  for (int i = 0; i < 64; ++i) junk += char(0x80 + rng() % 0x80);
  std::ofstream(latest, std::ios::binary | std::ios::trunc) << junk;
  std::vector<std::string> log;
  load_and_check_full(tmp.str(), 20, false, kPsi, &log);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log[0].find(latest + ": malformed pointer (64 bytes"), std::string::npos) << log[0];
  EXPECT_NO_THROW(nlohmann::json(log).dump());  // valid UTF-8
  save_step(tmp.str(), FullStates(kPsi, 30, false), 30, 2, 1);
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value_or(""), "step-000030");
  log.clear();
  load_and_check_full(tmp.str(), 30, false, kPsi, &log);
  EXPECT_TRUE(log.empty()) << log[0];
  // repair_latest points a bad pointer at a given checkpoint and says what was wrong.
  std::ofstream(latest, std::ios::trunc) << "nonsense\n";
  EXPECT_NE(repair_latest(tmp.str() + "/ckpt", "step-000020").find("malformed pointer 'nonsense'"),
            std::string::npos);
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value_or(""), "step-000020");
  EXPECT_EQ(repair_latest(tmp.str() + "/ckpt", "step-000010"), "");  // sound: left alone
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value_or(""), "step-000020");
}

// `latest` names step 10 while complete steps 20 and 30 exist (a crash between a commit's
// rename and the pointer's update, or a pointer moved back): loading takes the newest that
// verifies and says so in one line, the choice of `ckpt export` is the same, and a save of a
// step that exists and verifies fails instead of deleting it, while a damaged one is replaced.
TEST(CkptFaults, CheckpointsNewerThanLatestAreUsedAndNeverDeleted) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  save_step(tmp.str(), FullStates(kPsi, 30, false), 30, 2, 1);
  const std::string root = tmp.str() + "/ckpt";
  atomic_write_file(root + "/latest", "step-000010\n");
  std::vector<std::string> log;
  load_and_check_full(tmp.str(), 30, false, kPsi, &log);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], root + "/latest names step-000010, but step-000030 is newer and verifies: using it");
  std::vector<std::string> notes;
  auto note = [&](const std::string& l) { notes.push_back(l); };
  EXPECT_EQ(newest_good(root, note).value_or(""), step_dir(tmp.str(), 30));
  // A damaged newest one: both pass over it to step 20, also newer than `latest`.
  flip_byte(step_dir(tmp.str(), 30) + "/shard-00001-of-00002.bin", 64 + 300);
  log.clear();
  load_and_check_full(tmp.str(), 20, false, kPsi, &log);
  EXPECT_EQ(newest_good(root, note).value_or(""), step_dir(tmp.str(), 20));

  // A run that resumed from step 10 saves step 20: the good step 20 is kept, the save fails
  // naming it; the damaged step 30 is replaced by the new save (retention keeps 2).
  for (int64_t step : {20, 30}) {
    std::vector<std::string> saver_log;
    Group g(1);
    SaveStats st;
    g.run([&](int r) {
      CheckpointerOptions o = options(tmp.str(), r, 1, &g, &saver_log);
      o.keep_last = 2;
      Checkpointer c(o);
      c.save_async(request(FullStates(kPsi, step, false), step, r, 1, 0));
      try {
        st = c.wait();
      } catch (const Error& e) {
        st.error = e.what();
      }
    });
    if (step == 20) {
      EXPECT_NE(st.error.find(step_dir(tmp.str(), 20) + " already exists and verifies"), std::string::npos)
          << st.error;
    } else {
      EXPECT_TRUE(st.error.empty()) << st.error;
      ASSERT_FALSE(saver_log.empty());
      EXPECT_NE(saver_log[0].find("replacing damaged " + step_dir(tmp.str(), 30)), std::string::npos) << saver_log[0];
    }
  }
  for (int64_t s : {20, 30}) EXPECT_NO_THROW(CheckpointReader(step_dir(tmp.str(), s)).verify(true)) << s;
  load_and_check_full(tmp.str(), 30, false, kPsi);
}

TEST(CkptFaults, EveryCheckpointDamagedIsAnError) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  for (int64_t s : {10, 20}) fs::remove(step_dir(tmp.str(), s) + "/manifest.json");
  std::vector<float> p(kPsi);
  try {
    load_latest(tmp.str(), {{"params", DType::f32, {0, kPsi}, p.data(), {}}}, {{}, nullptr, [](auto&) {}, {}, nullptr});
    FAIL() << "loaded from damaged checkpoints";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable checkpoint"), std::string::npos) << e.what();
  }
}

TEST(CkptFaults, DifferentModelIsAClearError) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  std::vector<float> p(kPsi);
  LoadOptions o;
  o.expected_tensors = table_for(kPsi);
  o.expected_tensors[1].shape = {kPsi / 3 - 1};
  o.expected_tensors[1].name = "h.0.other";
  try {
    load_latest(tmp.str(), {{"params", DType::f32, {0, kPsi}, p.data(), {}}}, o);
    FAIL() << "loaded another model's checkpoint";
  } catch (const ModelMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("h.0.weight"), std::string::npos) << e.what();
  }
}

TEST(CkptFaults, RanksAgreeWhenOnlyOneReadsTheDamage) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  // Damage the last block of rank 1's exp_avg piece: under stage 1 on 2 ranks only rank 1
  // reads it, yet both ranks must fall back to step 10.
  Manifest m = read_manifest(step_dir(tmp.str(), 20));
  const PieceInfo* last = nullptr;
  for (const PieceInfo& q : m.shards[1].pieces)
    if (q.state == "exp_avg") last = &q;
  ASSERT_NE(last, nullptr);
  const PieceInfo& p = *last;
  flip_byte(step_dir(tmp.str(), 20) + "/" + m.shards[1].file, p.offset + p.bytes - 1);
  Group g(2);
  std::vector<int64_t> loaded(2, -1);
  g.run([&](int r) {
    std::vector<float> ea(static_cast<size_t>(kPsi / 2));
    LoadOptions o;
    o.all_ok = [&](bool ok) { return g.all_ok(r, ok); };
    o.log = [](const std::string&) {};
    auto res = load_latest(tmp.str(), {{"exp_avg", DType::f32, zero_shard(kPsi, r, 2), ea.data(), {}}}, o);
    loaded[size_t(r)] = res->train.step;
    for (int64_t i = 0; i < kPsi / 2; ++i)
      ASSERT_EQ(ea[size_t(i)], value(1, 10, zero_shard(kPsi, r, 2).begin + i));
  });
  EXPECT_EQ(loaded, (std::vector<int64_t>{10, 10}));
}

TEST(CkptFaults, DiskFullOnOneRankKeepsTheLastGoodCheckpoint) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  Group g(2);
  std::vector<std::string> errors(2);
  g.run([&](int r) {
    CheckpointerOptions o = options(tmp.str(), r, 2, &g);
    if (r == 1) o.faults.fail_write_after_bytes = 1000;
    Checkpointer c(o);
    c.save_async(request(FullStates(kPsi, 30, false), 30, r, 2, 1));
    try {
      c.wait();
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_NE(errors[1].find("No space left on device"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("rank 1 did not write its shard"), std::string::npos) << errors[0];
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000020");
  EXPECT_FALSE(fs::exists(tmp.str() + "/ckpt/.tmp-step-000030"));  // space given back
  load_and_check_full(tmp.str(), 20, false, kPsi);
}

TEST(CkptFaults, RealEnospcFromDevFull) {
  TempDir tmp;
  two_checkpoints(tmp.str());
  // The kernel's own ENOSPC: the shard's temporary name is a link to /dev/full.
  const std::string t = tmp.str() + "/ckpt/.tmp-step-000030";
  fs::create_directories(t);
  fs::create_symlink("/dev/full", t + "/shard-00000-of-00001.bin.tmp");
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  c.save_async(request(FullStates(kPsi, 30, false), 30, 0, 1, 0));
  try {
    c.wait();
    FAIL() << "save to a full disk succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  load_and_check_full(tmp.str(), 20, false, kPsi);
  // The next save works and clears the debris.
  c.save(request(FullStates(kPsi, 40, false), 40, 0, 1, 0));
  load_and_check_full(tmp.str(), 40, false, kPsi);
}

TEST(CkptFaults, UnwritableRunDirectoryIsAClearError) {
  TempDir tmp;
  std::ofstream(tmp.str() + "/file") << "x";
  for (const std::string& run : {tmp.str() + "/file/run", std::string("/proc/self/strata-run")}) {
    try {
      Checkpointer c(options(run, 0, 1, nullptr));
      FAIL() << "created checkpoints under " << run;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(run), std::string::npos) << e.what();
    }
  }
}

// A small tmpfs shows a real full disk and a real read-only one (EROFS). Needs permission to
// mount, which containers often lack: then the test is skipped (the injected and /dev/full
// failures above cover the same paths).
TEST(CkptFaults, TmpfsFullAndReadOnly) {
  TempDir tmp;
  const std::string mnt = tmp.str() + "/mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string run = mnt + "/run";
  Checkpointer c(options(run, 0, 1, nullptr));
  c.save(request(FullStates(4000, 10, false), 10, 0, 1, 0));  // 48 KB: fits
  c.save_async(request(FullStates(40000, 20, false), 20, 0, 1, 0));  // 480 KB: does not
  try {
    c.wait();
    FAIL() << "a save larger than the disk succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  load_and_check_full(run, 10, false, 4000);
  c.save(request(FullStates(4000, 30, false), 30, 0, 1, 0));  // space was given back
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k"), 0)
      << std::strerror(errno);
  c.save_async(request(FullStates(4000, 40, false), 40, 0, 1, 0));
  try {
    c.wait();
    FAIL() << "a save on a read-only disk succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Read-only file system"), std::string::npos) << e.what();
  }
  load_and_check_full(run, 30, false, 4000);
}

// Crash points: a forked job (2 rank threads) dies with _exit at one named instant of a save
// of step 30; afterwards the run holds step 20 or step 30, complete, and saves again.
TEST(CkptFaults, CrashAtEverySavePointLeavesOldOrNew) {
  const std::vector<std::pair<std::string, int64_t>> points = {
      {"shard_partial", 20},  {"shard_written", 20},  {"shard_renamed", 20},  {"index_written", 20},
      {"barrier", 20},        {"manifest_written", 20}, {"dir_renamed", 30},
      {"latest_written", 30}, {"retention_deleted", 30}};
  for (const auto& [point, expect] : points) {
    for (int crash_rank : {0, 1}) {
      // Past barrier #1 rank 0 may finish the commit before rank 1's crash lands, so rank 1
      // crashes only at the points before it.
      if (crash_rank == 1 && (expect == 30 || point == "barrier" || point == "manifest_written"))
        continue;
      SCOPED_TRACE(point + " on rank " + std::to_string(crash_rank));
      TempDir tmp;
      two_checkpoints(tmp.str());
      fflush(nullptr);
      pid_t pid = fork();
      if (pid == 0) {
        Group g(2);
        g.run([&](int r) {
          CheckpointerOptions o = options(tmp.str(), r, 2, &g);
          o.keep_last = 2;
          const std::string p = point;
          if (r == crash_rank) o.faults.at_point = [p](const char* at) {
            if (p == at) ::_exit(0);
          };
          Checkpointer c(o);
          c.save(request(FullStates(kPsi, 30, false), 30, r, 2, 1));
        });
        ::_exit(3);  // the crash point was never reached
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "crash point not reached";
      std::vector<std::string> log;
      LoadResult r = load_and_check_full(tmp.str(), expect, false, kPsi, &log);
      EXPECT_TRUE(r.skipped.empty()) << r.skipped[0];
      for (int64_t s : list_steps(tmp.str() + "/ckpt")) CheckpointReader(step_dir(tmp.str(), s)).verify(true);
      save_step(tmp.str(), FullStates(kPsi, 40, false), 40, 2, 1);
      load_and_check_full(tmp.str(), 40, false, kPsi);
      for (const auto& e : fs::directory_iterator(tmp.str() + "/ckpt"))
        EXPECT_NE(e.path().filename().string().rfind(".tmp-step-000030", 0), 0u) << "debris left";
    }
  }
}

// SIGKILL at random instants while a job saves continuously: every time, the newest good
// checkpoint loads and holds exactly the data of its step.
TEST(CkptFaults, SigkillAtRandomInstants) {
  TempDir tmp;
  const int64_t psi = 400000;  // 4.8 MB per save: saves take a few milliseconds
  save_step(tmp.str(), FullStates(psi, 1, false), 1, 1, 0);
  std::mt19937 gen(1234);
  int64_t last = 1, loaded_before = 1;
  for (int trial = 0; trial < 12; ++trial) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      CheckpointerOptions o = options(tmp.str(), 0, 1, nullptr);
      o.keep_last = 3;
      Checkpointer c(o);
      for (int64_t step = last + 1;; ++step) {
        FullStates f(psi, step, false);
        c.save_async(request(f, step, 0, 1, 0));  // copies f before returning
      }
    }
    ::usleep(useconds_t(2000 + gen() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::vector<float> p(static_cast<size_t>(psi));
    auto r = load_latest(tmp.str(), {{"params", DType::f32, {0, psi}, p.data(), {}}},
                         {{}, nullptr, [](auto&) {}, {}, nullptr});
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->skipped.empty());
    const int64_t step = r->train.step;
    EXPECT_GE(step, loaded_before);
    loaded_before = step;
    for (int64_t i = 0; i < psi; i += 997) ASSERT_EQ(p[size_t(i)], value(0, step, i)) << "step " << step;
    last += 1000;  // the next child starts past any step the killed one may have left
  }
}

TEST(CkptFaults, BarrierTimeoutCommitsNothing) {
  // Rank 0 of 2 whose peer never arrives: the communicator's barrier times out and throws.
  TempDir tmp;
  two_checkpoints(tmp.str());
  CheckpointerOptions o = options(tmp.str(), 0, 2, nullptr);
  int calls = 0;
  o.barrier = [&calls] {
    ++calls;
    throw TimeoutError("barrier: rank 1 did not arrive within 1 s");
  };
  Checkpointer c(o);
  c.save_async(request(FullStates(kPsi, 30, false), 30, 0, 2, 1));
  try {
    c.wait();
    FAIL() << "committed without its peer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not arrive"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 1);  // no second barrier on a broken group
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000020");
  load_and_check_full(tmp.str(), 20, false, kPsi);
}
