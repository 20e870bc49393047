// Subcommand registry. Each cli/cmd_*.cc file registers itself with a static
//
//   static strata::cli::Register reg("train", "Train a model", [](CLI::App& app) { ... });
//
// whose setup adds options and a callback to `app` (already created as a subcommand of
// `strata` or, for "bench comm", of `strata bench`). Callbacks throw strata::Error on bad
// input; main prints one line and exits non-zero.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

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

}  // namespace strata::cli
