// Subcommand registry. Each cli/cmd_*.cc file registers itself with a static
//
//   static strata::cli::Register reg("train", "Train a model", [](CLI::App& app) { ... });
//
// whose setup adds options and a callback to `app` (already created as a subcommand of
// `strata` or, for "bench comm", of `strata bench`). Callbacks throw strata::Error on bad
// input; main prints one line and exits non-zero.
#pragma once
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/files.h"
#include "core/finite.h"

namespace strata::cli {

using Setup = std::function<void(CLI::App&)>;

struct Command {
  std::string path;  // "train", "bench comm", "doctor hang"
  std::string summary;
  Setup setup;
};

std::vector<Command>& commands();

struct Register {
  Register(std::string path, std::string summary, Setup setup) {
    commands().push_back({std::move(path), std::move(summary), std::move(setup)});
  }
};

// Exit status a command callback asks main to return (e.g. `doctor hang` finding no cause).
// Throwing strata::Error gives 1; callbacks that want another code throw ExitCode.
struct ExitCode {
  int code;
};

// For unsigned options (seeds): CLI11 would wrap a negative value (-1 -> 2^64-1); this
// refuses it by its text: "--seed: must be >= 0 (got -1)".
inline const CLI::Validator& non_negative_integer() {
  static const CLI::Validator v(
      [](std::string& s) {
        const size_t first = s.find_first_not_of(" \t");
        return first != std::string::npos && s[first] == '-' ? "must be >= 0 (got " + s + ")"
                                                             : std::string();
      },
      "INT>=0");
  return v;
}

// The longest wait a seconds flag takes (a year): past it a value is a typo or an overflow.
inline constexpr double kMaxSeconds = 365.0 * 24 * 3600;

// Every floating-point flag's check, by its text as typed (core/finite.h): a finite number in
// `range`, else "--rope-theta: 1e-300 is too close to 0 to hold (...)". main gives it to every
// FLOAT option that has no check of this name, so a new flag cannot miss it; a flag with a
// range passes finite(range) itself. Config keys reach it too: run_config.cc feeds their text
// to the same option.
inline CLI::Validator finite(NumberRange range = {}) {
  CLI::Validator v([range](std::string& s) { return number_problem(s, range); }, "");
  v.name("finite");
  return v;
}

// A numeric flag checked by its text before any work: finite, within [lo, hi] (lo excluded when
// lo_open), so NaN, inf, 2^31 or 2^63 never reach an int cast or a loop bound:
// "--log-every: must be a number in [1, 1000000] (got 0)".
inline CLI::Validator number_in(double lo, double hi, bool lo_open = false) {
  CLI::Validator v(
      [lo, hi, lo_open](std::string& s) {
        const std::string problem = number_problem(s);
        const NumberRange range{lo, hi, lo_open, false};
        if (problem.empty() && range.contains(std::strtod(s.c_str(), nullptr))) return std::string();
        std::ostringstream m;
        m.precision(12);
        m << "must be a number in " << (lo_open ? "(" : "[") << lo << ", " << hi << "] ("
          << (problem.empty() ? "got " + s : problem) << ")";
        return m.str();
      },
      "NUMBER");
  v.name("finite");
  return v;
}

// A seconds or size flag whose sign the command checks itself: only non-numbers, inf and values
// past `hi` are refused here (1e400 parses as inf: a wait that never ends):
// "--timeout: must be a finite number of at most 31536000 (got 1e400)".
inline CLI::Validator finite_at_most(double hi) {
  CLI::Validator v(
      [hi](std::string& s) {
        const std::string problem = number_problem(s);
        if (problem.empty() && std::strtod(s.c_str(), nullptr) <= hi) return std::string();
        std::ostringstream m;
        m.precision(12);
        m << "must be a finite number of at most " << hi << " (" << (problem.empty() ? "got " + s : problem) << ")";
        return m.str();
      },
      "NUMBER");
  v.name("finite");
  return v;
}

// A path flag: an existing path that is not a regular file (or, with dir_ok, a directory) is
// refused before it is opened, so a FIFO cannot block a read and a device node or directory is
// never replaced by a write. `keyword` (e.g. "synthetic") is passed through.
inline CLI::Validator plain_path(bool dir_ok, std::string keyword = "") {
  return CLI::Validator(
      [dir_ok, keyword](std::string& s) {
        if (s == keyword) return std::string();
        const std::string kind = file_kind(s);
        if (kind == "missing" || kind == "a regular file" || (dir_ok && kind == "a directory"))
          return std::string();
        return s + ": is " + kind + ", not a regular file" + (dir_ok ? " or directory" : "");
      },
      "PATH");
}

// A directory flag or argument (a run directory, an output directory): an existing path that
// is not a directory is refused by its kind before anything reads or creates it, so a FIFO or a
// file never surfaces as "not a directory" or "no such directory" from deep inside:
// "--run-dir: RUN/fifo: is a FIFO, not a directory". A missing path is left to the command
// (some create it, some report it). `keywords` (e.g. "auto") pass through.
inline CLI::Validator dir_path(std::vector<std::string> keywords = {}) {
  return CLI::Validator(
      [keywords](std::string& s) {
        for (const std::string& k : keywords)
          if (s == k) return std::string();
        const std::string kind = file_kind(s);
        if (kind == "missing" || kind == "a directory") return std::string();
        return s + ": is " + kind + ", not a directory";
      },
      "DIR");
}

// A family's setting (cli/flags/family.h) narrowed for one command: its range there, and the
// command's own default (the field's value when this is called) shown in --help.
inline void narrow(CLI::App& app, const char* flag, const CLI::Validator& range) {
  app.get_option(flag)->check(range)->capture_default_str();
}

}  // namespace strata::cli
