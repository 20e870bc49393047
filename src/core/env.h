// Environment knobs, declared once where they are used and listed by `strata --help-env`:
//
//   static const EnvVar kTimeout("STRATA_TIMEOUT", "300", "seconds any blocking wait may take");
//   double t = kTimeout.get_double();
//
// Declare them at namespace scope (static storage) so they register before main runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class EnvVar {
 public:
  EnvVar(const char* name, const char* default_value, const char* help);
  const char* name() const { return name_; }
  const char* default_value() const { return default_; }
  const char* help() const { return help_; }
  bool is_set() const;
  std::string get() const;  // value, or the default when unset or empty
  // Parsed values; a malformed value throws an Error naming the variable.
  int64_t get_int() const;
  double get_double() const;
  bool get_bool() const;  // 1/0, true/false, yes/no, on/off

  static const std::vector<const EnvVar*>& all();

 private:
  const char* name_;
  const char* default_;
  const char* help_;
};

}  // namespace strata
