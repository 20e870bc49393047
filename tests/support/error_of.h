// The message of the strata::Error a call throws, or "" when it throws none: for tests that
// assert what a refusal says. error_of gives it as the command line shows it (a lower layer's
// SettingError with its settings written as flags, "--tp 3"); what_of as the layer says it
// ("tp 3").
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace strata::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SettingError& e) {
    return e.render("--");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::test
