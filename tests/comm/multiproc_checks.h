// Checks that the backends' multi-process tests share.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>

#include <sstream>
#include <string>
#include <vector>

#include "support/run.h"

namespace strata::comm::testing {

// `strata bench comm --check` output: every row's last column (#wrong) is 0. Returns the
// number of rows.
inline int expect_bench_rows_right(const std::string& out) {
  std::istringstream in(out);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.substr(line.find_last_not_of(' ')), "0") << line;  // #wrong
    ++rows;
  }
  return rows;
}

// The ranks of a `comm_worker kill-mid` run (rank `dead` SIGKILLs itself): every survivor
// caught the failure (exit 3) naming the dead rank.
inline void expect_survivors_name_dead_rank(const std::vector<test::Proc>& ranks, int dead) {
  EXPECT_EQ(ranks[size_t(dead)].exit_code(), 128 + SIGKILL);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (int(r) == dead) continue;
    const std::string& out = ranks[r].output();
    EXPECT_EQ(ranks[r].exit_code(), 3) << out;
    EXPECT_NE(out.find("rank " + std::to_string(dead)), std::string::npos) << out;
    EXPECT_NE(out.find("died"), std::string::npos) << out;
  }
}

}  // namespace strata::comm::testing
