#include "cli/flags/family.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "core/error.h"

namespace strata::cli {

const std::vector<std::string>& family_sections() {
  static const std::vector<std::string> s = {"model",       "data",  "training",   "optimizer", "parallelism",
                                             "outer",       "checkpoint", "metrics", "fault"};
  return s;
}

FamilyScope::FamilyScope(CLI::App& app, const std::string& title, const std::string& section, Only only)
    : app_(app), group_(title + " [" + section + "]"), only_(std::move(only)) {
  STRATA_CHECK(std::count(family_sections().begin(), family_sections().end(), section) == 1,
               "flag family ", title, ": unknown section [", section, "]");
  previous_ = app.option_defaults()->get_group();
  app.option_defaults()->group(group_);
}

FamilyScope::~FamilyScope() {
  app_.option_defaults()->group(previous_);
  if (only_.all()) return;
  std::vector<CLI::Option*> added;
  for (CLI::Option* o : app_.get_options())
    if (o->get_group() == group_) added.push_back(o);
  for (CLI::Option* o : added) {
    const bool wanted = std::any_of(only_.names.begin(), only_.names.end(),
                                    [o](const std::string& n) { return o->check_name(n); });
    if (!wanted) app_.remove_option(o);
  }
}

std::string section_of(const CLI::Option& o, const std::string& own) {
  const std::string& g = o.get_group();
  const size_t open = g.rfind(" [");  // found: g is not empty
  if (open == std::string::npos || g.back() != ']') return own;
  return g.substr(open + 2, g.size() - open - 3);
}

}  // namespace strata::cli
