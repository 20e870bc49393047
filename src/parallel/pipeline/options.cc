#include "parallel/pipeline/options.h"

#include "core/error.h"

namespace strata::parallel::pipeline {

std::vector<int> parse_split(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(at, end - at);
    size_t used = 0;
    int n = -1;
    try {
      n = std::stoi(part, &used);
    } catch (...) {
      used = 0;
    }
    STRATA_CHECK_SETTING(used == part.size() && !part.empty() && n >= 1, setting("pp-split"), " ",
                         text, ": '", part, "' is not a positive layer count (want e.g. 3,5)");
    out.push_back(n);
    at = end + 1;
  }
  return out;
}

}  // namespace strata::parallel::pipeline
