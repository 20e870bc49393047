// Flag families: the settings of one configuration struct, each declared once (name, type,
// default, help, check) in cli/flags/<family>.cc, and taken whole or in part by the commands
// that need them. The family is also the setting's --help group and its TOML section
// (cli/run_config.h): an option's group reads "Model [model]", and the section in brackets is
// where `--print-config` writes it and `--config` reads it. A command's own flags carry no
// family and live in the command's own section ([plan], [ppo], [fed]).
//
//   void OptimizerFlags::add_to(CLI::App& app, const Only& only) {
//     FamilyScope family(app, "Optimizer", "optimizer", only);
//     app.add_option("--lr", lr, "Peak learning rate")->capture_default_str();
//     ...
//   }
//
// A new setting is one add_option in its family (and the field it fills): the help group, the
// TOML key and section, --print-config and every command that takes the family follow.
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace strata::cli {

// The families' TOML sections in the order --print-config writes them.
const std::vector<std::string>& family_sections();

// Which of a family's settings a command takes: all (empty), or these flag names ("--lr").
struct Only {
  Only() = default;
  Only(std::initializer_list<const char*> names) : names(names.begin(), names.end()) {}
  bool all() const { return names.empty(); }
  std::vector<std::string> names;
};

// Options added to `app` while a scope lives belong to the family: their --help group is
// "<title> [<section>]". Settings outside `only` are removed again when the scope ends, so a
// family declares each setting once whichever part of it a command takes. A command takes its
// families before it declares flags of its own, which may then reuse a name a family left out
// (PPO's --seed).
class FamilyScope {
 public:
  FamilyScope(CLI::App& app, const std::string& title, const std::string& section, Only only = {});
  ~FamilyScope();
  FamilyScope(const FamilyScope&) = delete;
  FamilyScope& operator=(const FamilyScope&) = delete;

 private:
  CLI::App& app_;
  std::string group_, previous_;
  Only only_;
};

// The --help group of a flag's spelling from an earlier release, kept working for one more
// with a note; --print-config leaves it out (the new name carries the value).
inline constexpr const char* kOldSpellings = "Old spellings (removed in the next release)";

// The TOML section of a parsed option: its family's, or `own` for a command's own flag.
std::string section_of(const CLI::Option& o, const std::string& own);

// Every setting some family declares, by key (the flag without dashes) -> section: the keys a
// run config may hold for another command.
const std::map<std::string, std::string>& family_keys();

}  // namespace strata::cli
