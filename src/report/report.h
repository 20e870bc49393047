// `strata report`: one self-contained HTML page (inline SVG and CSS; no scripts, fonts or
// network) over one or more run directories, overlaid for comparison:
//   loss and eval curves against the entropy floor; tokens/s and MFU over steps; the step
//   time split (compute, optimizer, data wait, exposed communication, straggler wait,
//   checkpoint stall); communication overlap; memory per rank by category next to the
//   planner's model-state formula; checkpoint saves, restarts, stragglers and faults; and,
//   for a scaling-study directory (scaling.json), speedup against linear with the step-time
//   decomposition stacked beneath.
// Damaged input is shown as far as it is readable, with a line saying what was not.
#pragma once
#include <string>
#include <vector>

#include "report/run_data.h"

namespace strata::report {

struct Report {
  std::string html;
  std::vector<std::string> warnings;  // also shown at the top of the page
};

// Runs are shown in the given order. A scaling-study directory contributes its study and
// its points' runs.
Report build_report(const std::vector<RunData>& runs);

// Reads every directory (a scaling study adds its point directories). Directories that
// cannot be read at all become warnings; throws Error only when none can be read.
std::vector<RunData> load_runs(const std::vector<std::string>& dirs,
                               std::vector<std::string>& warnings);

}  // namespace strata::report
