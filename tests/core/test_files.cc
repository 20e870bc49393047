// The checked writers (atomic_write_file, LineLog) and quote_input: what every written file
// and every echoed piece of input text goes through.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using test::error_of;

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs f in a child whose files may grow to `bytes` at most (a full disk): returns the error
// f threw there, or "" when it did not throw.
std::string with_file_limit(rlim_t bytes, const std::function<void()>& f) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    const rlimit lim{bytes, bytes};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const std::string e = error_of(f);
    if (!e.empty() && ::write(fds[1], e.data(), e.size()) < 0) _exit(2);
    _exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return msg;
}

}  // namespace

TEST(QuoteInput, EscapesNonPrintablesAndCapsLongText) {
  EXPECT_EQ(quote_input("host-1"), "'host-1'");
  EXPECT_EQ(quote_input(std::string("a\0b\x01\xff\t\n", 7)), "'a\\x00b\\x01\\xff\\t\\n'");
  EXPECT_EQ(quote_input("it's"), "'it\\'s'");
  const std::string big(200'000'000, 'x');
  const std::string q = quote_input(big);
  EXPECT_EQ(q, "'" + std::string(80, 'x') + "...' (200000000 bytes)");
  // The cap counts escaped characters: 80 bytes of binary are not echoed as 320 characters.
  const std::string q2 = quote_input(std::string(1000, '\x02'));
  EXPECT_LT(q2.size(), 110u) << q2;
  EXPECT_NE(q2.find("...' (1000 bytes)"), std::string::npos) << q2;
  EXPECT_EQ(quote_input(std::string(80, 'y')), "'" + std::string(80, 'y') + "'");  // at the cap: whole
}

TEST(AtomicWrite, RefusesNonRegularTargetsAndLeavesNothingOnFailure) {
  test::TempDir dir("atomic");
  const std::string d = dir.str();
  atomic_write_file(d + "/a.json", "{}\n");
  EXPECT_EQ(slurp(d + "/a.json"), "{}\n");
  EXPECT_FALSE(fs::exists(d + "/a.json.tmp"));

  ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0644), 0);
  EXPECT_NE(error_of([&] { atomic_write_file(d + "/fifo", "x"); }).find("is a FIFO"), std::string::npos);
  fs::create_directories(d + "/sub");
  EXPECT_NE(error_of([&] { atomic_write_file(d + "/sub", "x"); }).find("is a directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(d + "/sub.tmp"));
  EXPECT_NE(error_of([&] { atomic_write_file("/dev/full", "x"); }).find("character device"), std::string::npos);

  // Out of space: the old file stays whole, no .tmp is left, the error names the file.
  const std::string e = with_file_limit(4096, [&] { atomic_write_file(d + "/a.json", std::string(100000, 'z')); });
  EXPECT_NE(e.find(d + "/a.json.tmp"), std::string::npos) << e;
  EXPECT_EQ(slurp(d + "/a.json"), "{}\n");
  EXPECT_FALSE(fs::exists(d + "/a.json.tmp"));
}

TEST(LineLog, AppendsCheckedLinesAndRefusesNonRegularTargets) {
  test::TempDir dir("linelog");
  const std::string d = dir.str();
  {
    LineLog log(d + "/m.jsonl", false, "metrics log");
    log.write_line("{\"step\":1}");
  }
  {
    LineLog log(d + "/m.jsonl", true, "metrics log");
    log.write_line("{\"step\":2}");
  }
  EXPECT_EQ(slurp(d + "/m.jsonl"), "{\"step\":1}\n{\"step\":2}\n");
  { LineLog log(d + "/m.jsonl", false, "metrics log"); }
  EXPECT_EQ(slurp(d + "/m.jsonl"), "");

  ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0644), 0);
  const std::string fifo = error_of([&] { LineLog(d + "/fifo", false, "metrics log"); });
  EXPECT_NE(fifo.find("metrics log " + d + "/fifo: is a FIFO"), std::string::npos) << fifo;
  EXPECT_NE(error_of([&] { LineLog("/dev/full", true, "metrics log"); }).find("character device"),
            std::string::npos);
  const std::string full = with_file_limit(1024, [&] {
    LineLog log(d + "/big.jsonl", false, "metrics log");
    for (int i = 0; i < 100; ++i) log.write_line(std::string(100, 'r'));
  });
  EXPECT_NE(full.find("cannot write " + d + "/big.jsonl"), std::string::npos) << full;
}
