// The data family, TOML section [data]: what the model reads (data/dataset.h):
//   --data synthetic|FILE.txt|FILE.bin|DIR --tail drop|pad|uneven --doc-mask --doc-token T
#pragma once
#include <string>

#include "cli/flags/family.h"

namespace strata::cli {

struct DataFlags {
  std::string data = "synthetic";
  std::string tail = "drop";  // the epoch's incomplete last global batch
  bool doc_mask = false;
  int doc_token = -1;  // -1: the prepared data's

  void add_to(CLI::App& app, const Only& only = {});
};

}  // namespace strata::cli
