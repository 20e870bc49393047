// strata rank-exec DIR -- PROGRAM ARGS   (internal: how `strata launch --backend mpi` starts
// each rank, so the first failing rank is named even when mpirun does not; launcher/rank_status.h)
#include "cli/command.h"
#include "launcher/rank_status.h"

namespace strata::cli {

static Register reg_rank_exec("rank-exec", "Run one rank of an mpirun job and record how it ended (internal)",
                    [](CLI::App& app) {
  app.group("");  // not listed in `strata --help`
  struct Args {
    std::string dir;
    std::vector<std::string> command;
  };
  auto a = std::make_shared<Args>();
  app.add_option("dir", a->dir, "directory for the rank's exit record")->required();
  app.add_option("command", a->command, "program and arguments (after --)")->required();
  app.callback([a] {
    int code = launcher::exec_and_record_status(a->dir, a->command);
    if (code != 0) throw ExitCode{code};
  });
});

}  // namespace strata::cli
