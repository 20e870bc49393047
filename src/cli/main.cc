// strata: the command-line entry point. Builds the subcommand tree from the registry,
// parses, runs, and turns every error into one line on stderr and a non-zero exit.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "cli/version.h"  // generated (src/cli/CMakeLists.txt)
#include "core/env.h"
#include "core/error.h"
#include "core/wait_policy.h"
#include "train/run_spec.h"

namespace strata::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

// What a command group ("strata doctor ...") is for, shown in `strata --help`.
static std::string group_summary(const std::string& name) {
  static const std::pair<const char*, const char*> groups[] = {
      {"bench", "Benchmarks: collectives in nccl-tests' format (bench comm), scaling study (bench scaling)"},
      {"ckpt", "List, verify, export and import checkpoints"},
      {"data", "Inspect the data pipeline: per-rank sample plans, corpus facts"},
      {"doctor", "Diagnose a hung job (doctor hang) or slow links (doctor net)"},
      {"fed", "Federated learning: train (server + client processes), compare with centralized"},
      {"rlhf", "RLHF: reward models on preference pairs, PPO with four models, KV-cache generation"},
      {"pp", "Pipeline parallelism: draw and validate schedules (pp schedule)"},
      {"trace", "Merge per-rank Chrome traces; report communication overlap"},
  };
  for (const auto& [g, text] : groups)
    if (name == g) return text;
  return "";
}

// Finds or creates the subcommand chain for "a b c".
static CLI::App* subcommand_for(CLI::App& root, const std::string& path, const std::string& summary) {
  std::istringstream words(path);
  std::vector<std::string> parts;
  for (std::string w; words >> w;) parts.push_back(w);
  CLI::App* app = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    CLI::App* next = nullptr;
    for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == parts[i]) next = sub;
    if (!next) {
      bool leaf = i + 1 == parts.size();
      next = app->add_subcommand(parts[i], leaf ? summary : group_summary(parts[i]));
      if (!leaf) next->require_subcommand(1);
    } else if (i + 1 == parts.size()) {
      next->description(summary);
    }
    app = next;
  }
  return app;
}

static void print_env_help() {
  std::printf("Environment variables read by strata:\n");
  for (const EnvVar* v : EnvVar::all())
    std::printf("  %-28s %s (default: %s)\n", v->name(), v->help(),
                *v->default_value() ? v->default_value() : "unset");
}

// Every floating-point option of `app` and its subcommands reads its text through finite()
// (command.h) unless it was declared with a check of that name (a range of its own).
static void check_every_float(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_name().rfind("FLOAT", 0) != 0) continue;
    try {
      o->get_validator("finite");
    } catch (const CLI::OptionNotFound&) {
      o->check(finite());
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_every_float(*sub);
}

}  // namespace strata::cli

// Before libgomp's constructor reads the environment (the loader runs an executable's
// .preinit_array ahead of every library's initialisers): a short OpenMP spin unless the user
// chose one; see core/wait_policy.h.
static void choose_wait_policy(int, char** argv, char** envp) {
  strata::reexec_with_wait_policy(argv, envp);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_wait_policy)(
    int, char**, char**) = &choose_wait_policy;

int main(int argc, char** argv) {
  using namespace strata::cli;
  // A line at a time even into a pipe (a rank under mpirun, the launcher's capture): step
  // lines arrive as they happen, and a rank that is killed leaves every line it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"strata: a distributed-training engine"};
  app.name("strata");
  app.require_subcommand(0, 1);
  app.fallthrough(false);
  bool help_env = false;
  app.add_flag("--help-env", help_env, "List the environment variables strata reads");
  app.set_version_flag("--version,-V", "strata " STRATA_VERSION " (commit " STRATA_GIT_COMMIT ")",
                       "Print the version and the git commit strata was built from");
  for (const Command& c : commands()) c.setup(*subcommand_for(app, c.path, c.summary));
  check_every_float(app);
  try {
    app.parse(argc, argv);
    if (help_env) {
      print_env_help();
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::cout << app.help();
      return 0;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "strata: error: %s (see --help)\n", strata::cap_long_words(e.what()).c_str());
    return 2;
  } catch (const ExitCode& e) {
    return e.code;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", strata::cap_long_words(strata::train::in_flags(e)).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error: %s\n", strata::cap_long_words(e.what()).c_str());
    return 1;
  }
  return 0;
}
