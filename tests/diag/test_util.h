// Writing flight-recorder dump sets for the diag tests (directories and running `strata`:
// support/).
#pragma once
#include <map>
#include <string>

#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::test {

inline void write_dumps(const TempDir& dir, const std::map<int, nlohmann::json>& dumps) {
  for (auto& [rank, j] : dumps) write_file(dir.file("flight-rank" + std::to_string(rank) + ".json"), j.dump());
}

}  // namespace strata::test
