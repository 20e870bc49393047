// The message of the strata::Error a call throws, or "" when it throws none: for tests that
// assert what a refusal says.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace strata::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::test
