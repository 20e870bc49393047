#include "core/threads.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata {

namespace {

// utime + stime of a /proc stat line, whose second field (the name, in parentheses) may hold
// spaces and parentheses itself; its name into `name`. -1 when the line does not parse.
double stat_cpu_s(const std::string& path, std::string* name) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return -1;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return -1;
  if (name) *name = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // After the name: state (3) ... utime (14), stime (15).
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  static const double tick = double(::sysconf(_SC_CLK_TCK));
  return double(utime + stime) / tick;
}

}  // namespace

std::map<std::string, double> cpu_seconds_by_thread() {
  std::map<std::string, double> out;
  const double total = stat_cpu_s("/proc/self/stat", nullptr);
  if (total < 0) return out;
  const std::string self = std::to_string(::getpid());
  double living = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::string name;
    const double s = stat_cpu_s(e.path().string() + "/stat", &name);
    if (s < 0) continue;  // ended while listed
    out[e.path().filename().string() == self ? "main" : name] += s;
    living += s;
  }
  if (total > living) out["ended threads"] += total - living;
  return out;
}

}  // namespace strata
