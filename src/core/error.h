// Errors: library code throws strata::Error with a message a person can act on
// (file or flag, rank, peer, sizes); only main() decides to exit.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A peer or operation that did not answer in time (distinct so callers can restart).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Concatenates any streamable values: cat("rank ", r, " sent ", n, " bytes").
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// printf formatting into a string of up to 1023 characters: fmt("%.1f MiB", mib).
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace strata

// STRATA_CHECK(cond, "message parts", ...): throws strata::Error naming the problem.
#define STRATA_CHECK(cond, ...)              \
  do {                                       \
    if (!(cond)) ::strata::fail(__VA_ARGS__); \
  } while (0)
