// Running strata itself as a child process (a study point, a calibration measurement):
// arguments passed as a vector (no shell), stdout and stderr to files, wall time measured.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace strata::report {

struct ChildResult {
  int status = -1;  // exit status; 128 + signal when killed
  double wall_s = 0;
};

// Runs `strata ARGS` (this executable) with extra environment variables; the child's stdout
// goes to out_path, stderr to err_path. Throws Error when it cannot be started.
ChildResult run_strata(const std::vector<std::string>& args,
                       const std::vector<std::pair<std::string, std::string>>& env,
                       const std::string& out_path, const std::string& err_path);

// The last line of a text file that is not empty (a child's error message), or "".
std::string last_line(const std::string& path);

}  // namespace strata::report
