// TOML run configs (`--config run.toml`, `--print-config`), in the spirit of torchtitan's:
// every flag of a command is a key, in the section of its flag family (cli/flags/family.h:
// [model], [data], [training], [optimizer], [parallelism], [checkpoint], [metrics], [fault]),
// or in the command's own ([plan], [ppo], [fed]) for a flag of its own, spelled as the flag
// without its dashes:
//
//   [model]
//   model = "tiny"
//   [parallelism]
//   nproc = 2
//   zero = 1
//
// Precedence: a flag given on the command line wins over the file. One file can feed several
// commands: a key that is some command's flag but not this one's is skipped (it applies
// elsewhere); a key no command knows, a key in the wrong section, or a value of the wrong type
// is an error naming the file, line and key. Values keep their exact text where it matters:
// floats are written in the shortest form that reads back to the same double.
//
// --print-config writes the resolved config and exits: every flag that is set (on the command
// line or in a file) as a key, every other flag as a commented line with its default, so the
// printout read back with --config resolves to the same run. `strata train` keeps it in its
// run dir as config.toml.
#pragma once
#include <string>

#include "CLI/CLI.hpp"

namespace strata::cli {

struct RunConfigFlags {
  std::vector<std::string> files;  // --config (repeatable: a later file wins)
  bool print = false;              // --print-config
  std::vector<CLI::Option*> required;  // checked after the files are applied
};

// Adds --config FILE and --print-config to `app` and applies the files once parsing is done:
// every flag they name that the command line did not is set and checked as if typed (before
// CLI11's required-flag check). `own_section` is where this command's flags go that no shared
// section lists, or that mean something else than train's ("plan", "ppo", "fed"). Errors name
// the file, line and key. Returns the flags' storage (alive as long as main).
RunConfigFlags& add_run_config(CLI::App& app, const std::string& own_section);

void apply_run_config(CLI::App& app, const RunConfigFlags& flags, const std::string& own_section);

// The resolved config of a parsed `app` as TOML text (see above).
std::string resolved_config(const CLI::App& app, const std::string& own_section);

}  // namespace strata::cli
