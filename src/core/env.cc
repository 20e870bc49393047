#include "core/env.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "core/finite.h"

namespace strata {

static std::vector<const EnvVar*>& registry() {
  static std::vector<const EnvVar*> vars;
  return vars;
}

EnvVar::EnvVar(const char* name, const char* default_value, const char* help)
    : name_(name), default_(default_value), help_(help) {
  registry().push_back(this);
}

const std::vector<const EnvVar*>& EnvVar::all() {
  auto& v = registry();
  std::sort(v.begin(), v.end(),
            [](const EnvVar* a, const EnvVar* b) { return std::strcmp(a->name(), b->name()) < 0; });
  return v;
}

bool EnvVar::is_set() const {
  const char* v = std::getenv(name_);
  return v && *v;
}

std::string EnvVar::get() const {
  const char* v = std::getenv(name_);
  return (v && *v) ? std::string(v) : std::string(default_);
}

int64_t EnvVar::get_int() const {
  std::string s = get();
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  STRATA_CHECK(!s.empty() && end && *end == '\0', "environment variable ", name_, "='", s,
               "' is not an integer");
  return v;
}

double EnvVar::get_double() const {
  const std::string s = get();
  const std::string problem = number_problem(s);  // as a flag's text (core/finite.h)
  STRATA_CHECK(problem.empty(), "environment variable ", name_, "='", s, "': ", problem);
  return std::strtod(s.c_str(), nullptr);
}

bool EnvVar::get_bool() const {
  std::string s = get();
  for (auto& c : s) c = char(std::tolower(c));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off" || s.empty()) return false;
  fail("environment variable ", name_, "='", s, "' is not a boolean (1/0, true/false)");
}

}  // namespace strata
