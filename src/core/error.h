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

// A refusal of a setting's value, said in the lower layer's own terms: the message names each
// setting by its key (the configuration field: "tp", "micro-batches") through setting(), and
// what() writes the key as it is ("tp 3 x dp 2 = 6 ranks, but the world has 4"). A program
// with its own spelling of the settings renders the message with it (the command line's
// RunSpec: "--tp 3 x --dp 2 = 6 ranks, ..."); a wrapper that adds context through what()
// keeps the keys.
class SettingError : public Error {
 public:
  explicit SettingError(const std::string& marked) : Error(render(marked, "")), marked_(marked) {}
  // The message with every named setting written prefix + key.
  std::string render(const std::string& prefix) const { return render(marked_, prefix); }
  static std::string render(const std::string& marked, const std::string& prefix);

 private:
  std::string marked_;
};

// A setting's key as a SettingError's message names it (marked, so that it can be rendered).
inline std::string setting(const std::string& key) { return "\x01" + key + "\x02"; }

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

// Throws a SettingError of the parts: fail_setting(setting("zero"), " ", s, ": expected 0-3").
template <typename... Args>
[[noreturn]] void fail_setting(Args&&... args) {
  throw SettingError(cat(std::forward<Args>(args)...));
}

}  // namespace strata

// STRATA_CHECK(cond, "message parts", ...): throws strata::Error naming the problem.
#define STRATA_CHECK(cond, ...)              \
  do {                                       \
    if (!(cond)) ::strata::fail(__VA_ARGS__); \
  } while (0)

// STRATA_CHECK_SETTING(cond, setting("tp"), " must be at least 1 (got ", tp, ")"): throws
// strata::SettingError, a refusal of the settings the message names.
#define STRATA_CHECK_SETTING(cond, ...)                                    \
  do {                                                                     \
    if (!(cond)) throw ::strata::SettingError(::strata::cat(__VA_ARGS__)); \
  } while (0)
