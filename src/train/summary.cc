#include "train/summary.h"

#include "core/error.h"

namespace strata::train {

void SummaryBuilder::set(const std::string& key, nlohmann::json value) {
  STRATA_CHECK(!doc_.contains(key), "summary.json: two parts of the run set \"", key, "\"");
  doc_[key] = std::move(value);
}

void SummaryBuilder::set_all(const nlohmann::json& keys) {
  for (auto it = keys.begin(); it != keys.end(); ++it) set(it.key(), it.value());
}

std::string SummaryBuilder::text() const {
  std::string out;
  for (const std::string& l : lines_) out += "\n" + l;
  return out;
}

}  // namespace strata::train
