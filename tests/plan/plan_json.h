// `strata plan ARGS --json`, parsed; a failed plan is a test failure naming its stderr.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"
#include "support/run.h"

namespace strata::test {

inline nlohmann::json plan_json(const std::string& args) {
  auto r = run_strata("plan " + args + " --json", "", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
  return nlohmann::json::parse(r.out);
}

}  // namespace strata::test
