// Bad input across the command line's surfaces (flags, environment, data files, checkpoints,
// safetensors, run directories), as a new user would type it. Each case is a command line and
// the files it needs; every one must end with a non-zero exit status (never a signal), within
// a time bound, with one line on stderr naming the flag or file at fault.
//
// Disk full is simulated with RLIMIT_FSIZE (`ulimit -f` in the case's shell, with SIGXFSZ
// ignored so writes fail with EFBIG instead of killing the process): no mount is needed, and
// the limit dies with the case's shell. (It also caps the size of shared-memory segments,
// so the disk-full cases run on one rank: a multi-rank job could not even create its segment.)
//
// STRATA_TEST_BINARY=/path/to/strata runs the cases against another build (e.g. an older one,
// to see which of them it fails).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/bad_input.h"
#include "nlohmann/json.hpp"

using nlohmann::json;
using namespace strata::bad_input;

namespace {

// A valid safetensors file of one F32 tensor, with the shape written as given (raw JSON).
void write_safetensors(const std::string& path, const std::string& shape_json, int64_t bytes) {
  std::string header = R"({"w":{"dtype":"F32","shape":)" + shape_json +
                       R"(,"data_offsets":[0,)" + std::to_string(bytes) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(size_t(bytes), '\0');
}

}  // namespace

TEST(BadInput, TrainFlags) {
  run_cases({
      {"minlr_nan", kTrain + "--min-lr nan", {"--min-lr", "nan"}},
      {"minlr_neg", kTrain + "--min-lr -1", {"--min-lr", "-1"}},
      {"warmup_neg", kTrain + "--warmup -5", {"--warmup", "-5"}},
      {"seed_neg", kTrain + "--seed -1", {"--seed", "-1"}},
      {"threads_zero", kTrain + "--threads 0", {"--threads", "0"}},
      {"resume_empty", kTrain + "--resume ''", {"--resume"}},
      {"peak_zero", kTrain + "--peak-gflops 0", {"--peak-gflops", "0"}},
      {"sample_huge", kTrain + "--sample-tokens 100000", {"--sample-tokens", "100000"}},
      {"ckpt_failures_neg", kTrain + "--ckpt-max-failures -1", {"--ckpt-max-failures"}},
      // CLI11 clamps past int64 to its maximum: the run never ended.
      {"steps_huge", kTrain + "--steps 99999999999999999999", {"--steps", "9223372036854775807"}},
      {"timeout_zero", kTrain, {"STRATA_TIMEOUT=0"}, nullptr, "STRATA_TIMEOUT=0"},
      {"timeout_neg", kTrain + "--nproc 2", {"STRATA_TIMEOUT=-1"}, nullptr, "STRATA_TIMEOUT=-1"},
  });
}

// Mixture of Experts (docs/moe.md): rejected before any rank starts or any step runs.
TEST(BadInput, MoEFlags) {
  run_cases({
      {"moe_topk", kTrain + "--experts 4 --top-k 5", {"--top-k 5", "--experts 4"}},
      {"moe_capacity", kTrain + "--experts 4 --capacity-factor 0", {"--capacity-factor", "0"}},
      {"moe_capacity_neg", kTrain + "--experts 4 --capacity-factor -1.5",
       {"--capacity-factor", "-1.5"}},
      {"moe_ep_divide", kTrain + "--nproc 2 --ep 2 --experts 3", {"--experts 3", "--ep 2"}},
      {"moe_ep_large", kTrain + "--nproc 2 --ep 4 --experts 4", {"--ep 4", "2"}},
      {"moe_ep_dense", kTrain + "--nproc 2 --ep 2", {"--ep 2", "--experts"}},
      // ep is carved out of dp x cp, never out of tp: 4 ranks at tp 2 leave 2 for it.
      {"moe_tp_ep", kTrain + "--nproc 4 --tp 2 --ep 4 --experts 4", {"--ep 4", "--dp 2"}},
  });
  // --moe-every past --layers leaves no MoE block: the per-step metrics read the expert region
  // that does not exist (signal 11 on a rank, or in one process at ZeRO 1-3).
  const std::vector<std::string> none = {"--moe-every 5", "--layers 4", "no block would be MoE"};
  const std::string moe = kTrain + "--layers 4 --dim 64 --heads 4 --experts 4 --top-k 2 --dropless --moe-every 5 ";
  run_cases({
      {"moe_every_ep", moe + "--nproc 2 --ep 2", none},
      {"moe_every_dp", moe + "--nproc 2", none},
      {"moe_every_tp", moe + "--nproc 2 --tp 2", none},
      {"moe_every_zero1", moe + "--zero 1", none},
      {"moe_every_zero3", moe + "--zero 3", none},
      {"moe_every_one", moe, none},
      {"moe_every_plan", "plan --local --layers 4 --dim 64 --heads 4 --experts 4 --moe-every 5", none},
  });
}

TEST(BadInput, DataSizesAndFiles) {
  run_cases({
      // The global batch overflowed 64 bits to 0: SIGFPE before; bad_alloc or minutes above.
      {"plan_overflow",
       "data plan --samples 100 --world 2097152 --micro-batch 2097152 --accum 4194304",
       {"--micro-batch 2097152", "--accum 4194304", "--world 2097152"}},
      {"plan_large", "data plan --samples 100 --world 65536 --micro-batch 65536 --accum 1",
       {"--world 65536", "too large"}},
      {"plan_accum_zero", "data plan --samples 100 --accum 0", {"--accum"}},
      {"plan_seed_neg", "data plan --samples 100 --seed -1", {"--seed", "-1"}},
      {"plan_samples_huge", "data plan --samples 9223372036854775807 --steps 1", {"--samples"}},
      // Printed "0 samples of -9223372036854775808 tokens".
      {"info_seq_huge", "data info --seq 99999999999999999999", {"--seq", "9223372036854775807"}},
      {"info_stride_neg", "data info --stride -1", {"--stride", "-1"}},
      {"info_val_nan", "data info --val-fraction nan", {"--val-fraction", "nan"}},
      {"synthetic_huge", "data info --data synthetic:99999999999999",
       {"synthetic:99999999999999"}},
      {"synthetic_overflow", "data info --data synthetic:99999999999999999999999",
       {"synthetic:99999999999999999999999"}},
      // open() on a FIFO blocked forever before.
      {"train_fifo", kTrain + "--data $D/fifo", {"$D/fifo", "FIFO"}, make_fifo},
      {"info_fifo", "data info --data $D/fifo", {"$D/fifo", "FIFO"}, make_fifo},
      {"info_device", "data info --data /dev/zero", {"/dev/zero", "device"}},
  });
}

TEST(BadInput, PlannerSizesAndFiles) {
  run_cases({
      {"global_batch_zero", "plan --model gpt2 --global-batch 0", {"--global-batch", "0"}},
      {"gpu_dir", "plan --model gpt2 --gpu $D", {"--gpu", "$D", "directory"}},
      {"gpu_fifo", "plan --model gpt2 --gpu $D/fifo", {"--gpu", "FIFO"}, make_fifo},
      // Printed "ZeRO sharding of -6446729073707551616 parameters" and negative memory.
      {"huge_model",
       "plan --layers 100000 --hidden 1000000 --heads 1000 --seq 1000 --vocab 1000 "
       "--global-batch 8",
       {"parameters", "--layers 100000", "--hidden 1000000"}},
      {"huge_dim", "plan --layers 2 --hidden 64 --heads 1 --seq 99999999999 --vocab 1000 "
                   "--global-batch 8", {"--seq", "99999999999"}},
      {"gpus_huge", "plan --model gpt2 --gpus 99999999999", {"--gpus", "99999999999"}},
  });
}

TEST(BadInput, CheckpointCommands) {
  const std::string& run_dir = checkpointed_run();
  run_cases({
      {"import_dir", "ckpt import $D", {"$D", "directory"}},
      {"import_fifo", "ckpt import $D/fifo", {"$D/fifo", "FIFO"}, make_fifo},
      {"import_numel_overflow", "ckpt import $D/w.safetensors", {"w.safetensors", "'w'", "64 bits"},
       [](const std::string& d) {
         write_safetensors(d + "/w.safetensors", "[4611686018427453440]", 8);
       }},
      {"import_fractional", "ckpt import $D/w.safetensors", {"w.safetensors", "256.5"},
       [](const std::string& d) {
         write_safetensors(d + "/w.safetensors", "[256.5,256]", 256 * 256 * 4);
       }},
      {"import_negative", "ckpt import $D/w.safetensors", {"w.safetensors", "-4"},
       [](const std::string& d) { write_safetensors(d + "/w.safetensors", "[-4,-4]", 64); }},
      {"export_device", "ckpt export " + run_dir + " --safetensors /dev/full",
       {"/dev/full", "device"}},
      {"advise_huge", "ckpt advise --mtbf 1e308h --stall 1e308s", {"1e308"}},
      {"advise_overflow", "ckpt advise --mtbf 1e400h --stall 1s", {"1e400h"}},
  });
  // Nothing replaced or left behind.
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_FALSE(fs::exists("/dev/full.tmp"));
}

// A safetensors export that cannot complete removes its temporary file: onto a directory (it
// left a 13 MB .tmp before), and out of space.
TEST(BadInput, FailedExportLeavesNothing) {
  const std::string& run_dir = checkpointed_run();
  TempDir dir("export_full");
  fs::create_directories(dir.str() + "/out");
  expect_clean_failure(run(dir.str(), "ckpt export " + run_dir + " --safetensors $D/out"),
                       {dir.str() + "/out", "directory"});
  EXPECT_FALSE(fs::exists(dir.str() + "/out.tmp"));

  Outcome r = run(dir.str(), "ckpt export " + run_dir + " --safetensors $D/m.safetensors",
                  "trap '' XFSZ; ulimit -f 16;");
  expect_clean_failure(r, {"m.safetensors"});
  EXPECT_FALSE(fs::exists(dir.str() + "/m.safetensors"));
  EXPECT_FALSE(fs::exists(dir.str() + "/m.safetensors.tmp"));
}

// Every save failing (the disk is full) must not end in exit 0 with an empty ckpt/; repeated
// failures stop the run early (--ckpt-max-failures).
TEST(BadInput, AllCheckpointSavesFailing) {
  TempDir dir("diskfull");
  const std::string full = "trap '' XFSZ; ulimit -f 64;";  // metrics fit, shards do not
  Outcome r = run(dir.str(), kTrain + "--steps 4 --ckpt-every 2 --run-dir $D/a", full);
  expect_clean_failure(r, {"no good checkpoint", "2 checkpoint save(s)"}, /*one_line=*/false);

  r = run(dir.str(), kTrain + "--steps 40 --ckpt-every 1 --ckpt-max-failures 2 --run-dir $D/b",
          full);
  expect_clean_failure(r, {"--ckpt-max-failures 2", "stopping at step", "no good checkpoint"},
                       /*one_line=*/false);
  int steps = 0;
  std::ifstream m(dir.str() + "/b/metrics.jsonl");
  for (std::string line; std::getline(m, line);)
    steps += line.find("\"loss\"") != std::string::npos;
  EXPECT_GE(steps, 2);
  EXPECT_LT(steps, 10);  // stopped at the second failure in a row, not after 40 steps

  // 0: never stop; the run still ends non-zero without a good checkpoint.
  r = run(dir.str(), kTrain + "--steps 4 --ckpt-every 1 --ckpt-max-failures 0 --run-dir $D/c", full);
  expect_clean_failure(r, {"no good checkpoint", "4 checkpoint save(s)"}, /*one_line=*/false);
}

// A second job on a run dir in use is refused, naming the holder's pid, also with --resume
// auto; the first job's files are untouched.
TEST(BadInput, RunDirInUseIsRefused) {
  TempDir dir("lock");
  const std::string holder_cmd = "exec " + strata_binary() + " " + kTrain +
                                 "--steps 100000 --ckpt-every 50 --log-every 1000 --run-dir " +
                                 dir.str() + "/run";
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl("/bin/sh", "sh", "-c", holder_cmd.c_str(), (char*)nullptr);
    ::_exit(127);
  }
  struct StopHolder {  // on every way out of the test, assertions included
    pid_t pid;
    ~StopHolder() {
      if (pid <= 0) return;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } stop{holder};
  // Wait until the holder has written its pid into the lock.
  const std::string lock = dir.str() + "/run/.strata-lock";
  for (int i = 0; i < 1000 && read_file(lock).find(std::to_string(holder)) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(read_file(lock).find(std::to_string(holder)), std::string::npos);
  const std::string pid = "pid " + std::to_string(holder);
  for (const char* extra : {"", "--resume auto ", "--nproc 2 "}) {
    SCOPED_TRACE(extra);
    Outcome r = run(dir.str(), kTrain + extra + "--steps 2 --ckpt-every 1 --run-dir $D/run");
    expect_clean_failure(r, {"--run-dir", dir.str() + "/run", "in use", pid},
                         /*one_line=*/std::string(extra) != "--nproc 2 ");
  }
  ::kill(holder, SIGTERM);
  ::waitpid(holder, nullptr, 0);
  stop.pid = 0;
  // Every line the holder wrote is whole JSON (no interleaved half-lines).
  std::ifstream m(dir.str() + "/run/metrics.jsonl");
  for (std::string line; std::getline(m, line);)
    EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded()) << line;
  // Once the holder is gone the run dir is free again.
  Outcome r = run(dir.str(), kTrain + "--steps 1 --run-dir $D/run2");
  EXPECT_EQ(r.status, 0) << r.err;
}

// Resuming a run whose checkpoint is already at --steps does nothing and says so: no fake
// "eval loss -1.0000" or "0 tok/s", and summary.json keeps the figures of the run that trained.
TEST(BadInput, ResumeAtLastStepSaysNothingToDo) {
  TempDir dir("resume_done");
  Outcome first = run(dir.str(), kTrain + "--steps 2 --ckpt-every 2 --run-dir $D/run");
  ASSERT_EQ(first.status, 0) << first.err;
  const std::string summary = read_file(dir.str() + "/run/summary.json");
  Outcome again = run(dir.str(), kTrain + "--steps 2 --ckpt-every 2 --run-dir $D/run --resume auto");
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("-1.0000"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find(" 0 tok/s"), std::string::npos) << again.out;
  EXPECT_EQ(read_file(dir.str() + "/run/summary.json"), summary);
}

// A small fuzz sweep: hostile values for every numeric flag of `strata train`. Any outcome
// but a crash, a hang or an unreadable error is fine: a value may be accepted (then the
// tiny run trains its steps and exits 0) or refused in one line naming the flag.
TEST(BadInput, TrainFlagSweepNeverCrashes) {
  TempDir dir("sweep");
  const std::vector<std::string> flags = {
      "--layers", "--dim", "--heads", "--max-seq", "--seq", "--vocab", "--steps", "--batch",
      "--micro-batch", "--lr", "--min-lr", "--warmup", "--weight-decay", "--grad-clip",
      "--eval-every", "--eval-batches", "--sample-every", "--sample-tokens", "--log-every",
      "--threads", "--peak-gflops", "--ckpt-every", "--ckpt-keep", "--straggler-pct"};
  const std::vector<std::string> values = {"-1", "nan", "1e400", "99999999999999999999", "x"};
  for (const std::string& f : flags)
    for (const std::string& v : values) {
      SCOPED_TRACE(f + " " + v);
      Outcome r = run(dir.str(), kTrain + "--steps 1 --run-dir $D/r " + f + " " + v, "", 30);
      fs::remove_all(dir.str() + "/r");
      EXPECT_FALSE(r.timed_out);
      EXPECT_EQ(r.signal, 0) << r.err;
      if (r.status == 0) continue;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
      EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
    }
}

// Safetensors headers mutated byte by byte: read back as valid or refused in one line, never
// a crash or a hang.
TEST(BadInput, SafetensorsHeaderMutationsNeverCrash) {
  TempDir dir("st_fuzz");
  const std::string good = dir.str() + "/good.safetensors";
  write_safetensors(good, "[4,4]", 64);
  const std::string bytes = read_file(good);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < 40; ++i) {
    std::string m = bytes;
    const size_t header_end = std::min(m.size(), size_t(8 + 80));
    for (int k = 0; k < 1 + i % 3; ++k) m[next() % header_end] = char(next() >> 56);
    const std::string path = dir.str() + "/m.safetensors";
    std::ofstream(path, std::ios::binary) << m;
    SCOPED_TRACE(m.substr(0, header_end));
    Outcome r = run(dir.str(), "ckpt import " + path, "", 10);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.signal, 0) << r.err;
    if (r.status != 0) {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
    }
  }
}

// The same sweep over `strata plan`: a value is refused in one line naming the flag, or the
// report (exit 0, or 3 when nothing fits) holds no NaN, infinity or negative count.
TEST(BadInput, PlanFlagSweepPrintsOnlyNumbers) {
  TempDir dir("plan_sweep");
  const std::vector<std::string> flags = {
      "--micro-batch", "--tp", "--pp", "--dp", "--cp", "--zero", "--top", "--tokens",
      "--headroom", "--efficiency", "--overlap", "--bucket-mb", "--gpu-mtbf-hours",
      "--job-mtbf-hours", "--storage-gbps", "--restart-min", "--ckpt-stall-s", "--gpus",
      "--gpus-per-node", "--global-batch", "--seq", "--vocab"};
  const std::vector<std::string> values = {"-1", "nan", "1e400", "99999999999999999999"};
  const std::regex junk("nan|inf[^oe]|-[0-9]{4,}");
  for (const std::string& f : flags)
    for (const std::string& v : values) {
      SCOPED_TRACE(f + " " + v);
      Outcome r = run(dir.str(), "plan --model gpt2 " + f + " " + v, "", 20);
      EXPECT_FALSE(r.timed_out);
      EXPECT_EQ(r.signal, 0) << r.err;
      if (r.status == 0 || r.status == 3) {
        EXPECT_FALSE(std::regex_search(r.out, junk)) << r.out;
        continue;
      }
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
    }
}

// Advice for a stall as long as the MTBF is not presented as a plan: it says no interval
// makes progress (it printed "time wasted overall ~350%" and nothing else).
TEST(BadInput, AdviceForAStallLongerThanTheMtbfWarns) {
  TempDir dir("advise");
  Outcome r = run(dir.str(), "ckpt advise --mtbf 1h --stall 3h");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("warning: the stall is too long for this MTBF"), std::string::npos) << r.out;
  r = run(dir.str(), "ckpt advise --mtbf 4h --stall 40ms");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
}

// ---- launch, pp, doctor, report, ckpt, plan ----
// Rows are Case{name, args, needles, setup, prefix, one_line}; numeric flags come from one
// generated table (flag x values), each row naming the flag and the value in the error line.

namespace {

// One row per value of `flag` after `command`; the error line must name the flag and the value.
void add_numeric_rows(std::vector<Case>& rows, const std::string& command, const std::string& flag,
                      const std::vector<std::string>& values, const std::string& tail = "") {
  for (const std::string& v : values)
    rows.push_back({command + flag + v, command + " " + flag + " " + v + tail, {flag, v}});
}

}  // namespace

// Counts past what a timeline, a buffer or the launcher can hold fail in one line at once
// (bad_alloc, max_size(), minutes of work or a hang before).
TEST(BadInput, LaunchPpDoctorNumericFlags) {
  const std::vector<std::string> counts = {"0", "-1", "nan", "2147483648", "9223372036854775808"};
  std::vector<Case> rows;
  for (const char* f : {"--pp", "--micro-batches", "--virtual-stages"})
    add_numeric_rows(rows, "pp schedule", f, counts);
  add_numeric_rows(rows, "pp schedule", "--pp", {"100000", "2147483647"});
  add_numeric_rows(rows, "pp schedule", "--micro-batches", {"1000000"});
  add_numeric_rows(rows, "pp schedule", "--virtual-stages", {"1000000"});
  for (const char* f : {"--nproc", "--tp", "--reps", "--iters"})
    add_numeric_rows(rows, "doctor net", f, counts);
  for (const char* f : {"--bytes", "--coll-bytes"})
    add_numeric_rows(rows, "doctor net --nproc 2", f, {"0", "nan", "1000G", "99999999999999999999"});
  add_numeric_rows(rows, "doctor net", "--threshold", {"0", "-1", "nan", "2"});
  add_numeric_rows(rows, "doctor net", "--timeout", {"-1"});
  add_numeric_rows(rows, "launch", "-n", {"0", "-1", "nan", "2147483648"}, " -- true");
  add_numeric_rows(rows, "launch -n 1", "--grace", {"nan", "-1"}, " -- true");
  add_numeric_rows(rows, "launch -n 1", "--timeout", {"-1"}, " -- true");
  add_numeric_rows(rows, "launch -n 1", "--max-restarts", {"-1", "nan"}, " -- true");
  rows.push_back({"pp_actions", "pp schedule --pp 1024 --micro-batches 1024",
                  {"--pp 1024", "--micro-batches 1024", "65536"}});
  // Each forked rank costs the launcher descriptors: refused before the first fork, naming the
  // limit ("pipe failed: Too many open files" after hundreds of forks before).
  rows.push_back({"launch_fds", "launch -n 100 -- true", {"-n/--nproc 100", "ulimit -n"}, nullptr,
                  "ulimit -n 256;"});
  // An empty host list read as "not given" and ran on this host alone.
  rows.push_back({"hosts_empty", "doctor net --hosts ''", {"--hosts", "''"}});
  rows.push_back({"launch_hostfile_empty", "launch --hostfile '' -- true", {"--hostfile", "''"}});
  rows.push_back({"scaling_repeat", "bench scaling --nproc 1,1", {"--nproc 1,1", "twice"}});
  // sleep_for wraps past ~292 years and never slept.
  rows.push_back({"inject_sleep_huge", kTrain + "--inject sleep:1e300", {"--inject sleep:1e300", "at most"}});
  run_cases(rows);
}

// Path flags naming a FIFO, a device or a directory: refused before anything is opened or
// replaced (a FIFO blocked open() forever; /dev/full was replaced by a regular file).
TEST(BadInput, LaunchPpDoctorReportPathFlags) {
  const std::string run_dir = checkpointed_run();
  run_cases({
      {"report_in_fifo", "report $D/fifo", {"$D/fifo"}, make_fifo},
      {"report_out_fifo", "report " + run_dir + " -o $D/fifo", {"-o $D/fifo", "FIFO"}, make_fifo},
      {"report_out_dir", "report " + run_dir + " -o $D", {"-o $D", "directory"}},
      {"report_out_device", "report " + run_dir + " -o /dev/full", {"-o /dev/full", "device"}},
      {"hostfile_fifo", "doctor net --nproc 2 --backend mpi --hostfile $D/fifo",
       {"--hostfile $D/fifo", "FIFO"}, make_fifo},
      {"launch_hostfile_fifo", "launch --backend mpi --hostfile $D/fifo -- true",
       {"--hostfile $D/fifo", "FIFO"}, make_fifo},
  });
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full was replaced";
  TempDir dir("report_dir_tmp");
  fs::create_directory(dir.str() + "/d");
  Outcome r = run(dir.str(), "report " + run_dir + " -o $D/d");
  EXPECT_GT(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir.str() + "/d.tmp")) << "a directory target left DIR.tmp";
}

// ---- train flags ----
namespace {

// Two pipeline stages over four layers.
const std::string kPp = kTrain + "--layers 4 --nproc 2 --pp 2 ";

TEST(BadInput, TrainFlagsRefused) {
  std::vector<Case> rows = {
      {"reduce_dtype_empty", kTrain + "--reduce-dtype ''", {"--reduce-dtype ''", "fp32 or bf16"}},
      // L % (P x 0) raised SIGFPE; P x (2^31 - 1) wrapped to "-2 stages for 4 layers".
      {"virtual_stages_zero", kPp + "--virtual-stages 0", {"--virtual-stages", "0"}},
      {"virtual_stages_zero_interleaved", kPp + "--schedule interleaved --virtual-stages 0",
       {"--virtual-stages", "0"}},
      {"virtual_stages_huge", kPp + "--schedule interleaved --virtual-stages 2147483647",
       {"--virtual-stages 2147483647", "--pp 2", "4294967294", "4 layers"}},
      // Padding 2^31 - 1 to 64 printed "padded vocabulary -2147483584".
      {"vocab_huge", kTrain + "--vocab 2147483647", {"--vocab", "2147483647"}},
      // Minutes of building expert tables before any message.
      {"experts_huge", kTrain + "--experts 2147483647", {"--experts 2147483647", "parameters"}},
      {"experts_1e7", kTrain + "--experts 10000000", {"--experts 10000000", "parameters"}},
      // Accepted and ignored: dp 0 read as "derive it", a schedule or cp mode without the
      // parallelism that runs it, an activation budget that refuses nothing.
      {"dp_zero", kTrain + "--dp 0", {"--dp", "0"}},
      {"schedule_without_pp", kTrain + "--schedule zb", {"--schedule zb", "--pp 1"}},
      {"cp_mode_without_cp", kTrain + "--cp-mode ulysses", {"--cp-mode ulysses", "--cp 1"}},
      {"max_activation_zero", kTrain + "--max-activation-mb 0", {"--max-activation-mb", "0"}},
      {"max_activation_neg", kTrain + "--max-activation-mb -1", {"--max-activation-mb", "-1"}},
      // Named the per-cp-rank 16 as "the training sequence".
      {"sp_seq_per_cp_rank",
       kTrain + "--heads 6 --dim 48 --max-seq 32 --seq 32 --nproc 6 --cp 2 --tp 3",
       {"--tp 3", "--seq 32 / --cp 2 = 16 tokens per cp rank", "not divisible by 3"}},
  };
  // Under the flat-buffer bound but ~50 GiB of model states (fp32 parameters, gradients and
  // two moments): refused by the host's memory, so only where the host has less than that.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (meminfo >> key >> kb && key != "MemAvailable:") meminfo.ignore(1 << 10, '\n');
  if (key == "MemAvailable:" && kb < (int64_t(48) << 20))
    rows.push_back({"experts_past_memory", kTrain + "--experts 400000", {"--experts 400000", "MiB"}});
  run_cases(rows);
}

}  // namespace

// ---- rlhf, fed, privacy ----
// Every numeric flag of these commands against the values a person (or a script) gets wrong:
// each one is refused by its text while the command line is parsed, before a model is loaded
// or a process started. `zero_ok` flags take 0 (a documented "off"); `small` flags are doubles
// for which 2^31 is still a sane value and only the non-numbers and negatives are tried.
namespace {

struct NumericFlag {
  std::string base;  // command and required flags
  std::string flag;
  bool zero_ok = false;
  bool small = false;  // 2^31 and 2^63 are in range
};

std::vector<Case> numeric_cases(const std::vector<NumericFlag>& flags) {
  std::vector<Case> cases;
  for (const NumericFlag& f : flags) {
    std::vector<std::string> bad = {"-4", "nan", "inf", "1e400"};
    if (!f.zero_ok) bad.push_back("0");
    if (!f.small) bad.insert(bad.end(), {"2147483648", "9223372036854775808"});
    for (const std::string& v : bad)
      cases.push_back({f.flag.substr(2) + "_" + v, f.base + " " + f.flag + " " + v, {f.flag, v}});
  }
  return cases;
}

const std::string kReward = "rlhf reward --init $D/none -o $D/rm.safetensors";
const std::string kPpo = "rlhf ppo --actor $D/none --reward $D/none";
const std::string kGenerate = "rlhf generate --actor $D/none";
const std::string kFed = "fed train --clients 2 --per-round 2 --rounds 1";
const std::string kPrivacy = "privacy --samples 100 --batch 10 --steps 10";

}  // namespace

TEST(BadInput, RlhfFedPrivacyNumbers) {
  std::vector<NumericFlag> flags;
  for (const char* f : {"--num-pairs", "--prompt-len", "--response-len", "--steps", "--batch", "--log-every"})
    flags.push_back({kReward, f});
  flags.push_back({kReward, "--temperature"});
  for (const char* f : {"--eval-fraction", "--lr", "--weight-decay"}) flags.push_back({kReward, f, true});
  for (const char* f : {"--nproc", "--iterations", "--rollout-batch", "--minibatch", "--epochs", "--prompt-len",
                        "--response-len", "--temperature", "--clip", "--value-clip"})
    flags.push_back({kPpo, f});
  for (const char* f : {"--top-k", "--kl-coef", "--kl-target", "--gamma", "--lambda", "--actor-lr", "--critic-lr",
                        "--ckpt-every"})
    flags.push_back({kPpo, f, true});
  flags.push_back({kPpo, "--ent-coef", true, true});
  flags.push_back({kPpo, "--grad-clip", true, true});
  for (const char* f : {"--batch", "--prompt-len", "--response-len", "--repeats"}) flags.push_back({kGenerate, f});
  for (const char* f : {"--temperature", "--top-k"}) flags.push_back({kGenerate, f, true});
  for (const std::string& base : {kFed, std::string("fed compare --rounds 1")}) {
    for (const char* f : {"--clients", "--per-round", "--rounds", "--local-steps", "--local-epochs", "--lr",
                          "--server-lr", "--seq", "--layers", "--dim", "--heads", "--threshold", "--delta",
                          "--eval-windows"})
      flags.push_back({base, f});
    for (const char* f : {"--sa-range", "--clip-norm", "--noise-multiplier"}) flags.push_back({base, f, false, true});
    for (const char* f : {"--local-batch", "--prox-mu", "--dropout", "--deadline", "--eval-every", "--timeout"})
      flags.push_back({base, f, true});
  }
  flags.push_back({"privacy --samples 100 --steps 10", "--batch"});
  flags.push_back({kPrivacy, "--target-epsilon"});
  for (const char* f : {"--samples", "--noise-multiplier"}) flags.push_back({kPrivacy, f, false, true});
  flags.push_back({"privacy --samples 100 --batch 10 --noise-multiplier 1", "--epochs", true});
  flags.push_back({"privacy --samples 100 --batch 10 --noise-multiplier 1", "--steps", true, true});
  flags.push_back({kPrivacy, "--delta"});
  run_cases(numeric_cases(flags));
}

TEST(BadInput, RlhfFedPrivacyPaths) {
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, std::string>> paths = {
      {"rlhf reward -o $D/rm.safetensors", "--init"},
      {"rlhf reward --init $D/none -o $D/rm.safetensors", "--pairs"},
      {"rlhf reward --init $D/none", "-o"},
      {"rlhf reward --init $D/none -o $D/rm.safetensors", "--save-pairs"},
      {"rlhf ppo --reward $D/none", "--actor"},
      {"rlhf ppo --actor $D/none --reward $D/none", "--reference"},
      {"rlhf ppo --actor $D/none", "--reward"},
      {"rlhf ppo --actor $D/none --reward $D/none", "--critic"},
      {"rlhf generate", "--actor"},
      {kFed, "--summary"},
  };
  for (const auto& [base, flag] : paths)
    cases.push_back({"fifo" + flag, base + " " + flag + " $D/fifo", {flag, "$D/fifo", "not a regular file"},
                     make_fifo});
  // PPO's run dir is the metrics family's --run-dir, checked as train's: a directory.
  cases.push_back({"fifo--run-dir", "rlhf ppo --actor $D/none --reward $D/none --run-dir $D/fifo",
                   {"--run-dir", "$D/fifo", "not a directory"}, make_fifo});
  // Outputs that would replace a device node or fail on a directory after the work.
  cases.push_back({"out_device", "rlhf reward --init $D/none -o /dev/full", {"-o", "/dev/full"}});
  cases.push_back({"out_dir", "rlhf reward --init $D/none -o $D", {"-o", "not a regular file"}});
  cases.push_back({"summary_dir", kFed + " --summary $D", {"--summary", "not a regular file"}});
  run_cases(cases);
}

TEST(BadInput, RlhfFedPrivacyCombinations) {
  run_cases({
      {"threshold_no_sa", kFed + " --threshold 2", {"--threshold 2", "--secure-agg"}},
      {"non_iid_bogus", "fed compare --rounds 1 --non-iid bogus", {"bogus"}},
      {"clients_host", "fed train --clients 100000 --per-round 2", {"--clients 100000", "at most"}},
      {"privacy_epochs_huge", "privacy --samples 1000000000000 --batch 1 --noise-multiplier 1 --epochs 100000",
       {"--epochs", "at most"}},
  });
}
