#include "train/metrics.h"

#include <unistd.h>

#include <filesystem>

#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/timer.h"
#include "nlohmann/json.hpp"

namespace strata::train {

namespace fs = std::filesystem;

static const EnvVar kProgressTty("STRATA_PROGRESS_TTY", "0",
                                 "1: draw the live progress line although stdout is a pipe (set "
                                 "for rank 0 by `strata train --nproc N` on a terminal)");

MetricsWriter::MetricsWriter(const std::string& run_dir, bool json_stdout, std::FILE* out,
                             bool append)
    : run_dir_(run_dir), json_(json_stdout), out_(out) {
  live_ = !json_ && out_ && (isatty(fileno(out_)) || kProgressTty.get_bool());
  if (run_dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  STRATA_CHECK(!ec && fs::is_directory(run_dir_), "cannot create run directory ", run_dir_, ": ",
               ec ? ec.message() : "a file of that name exists");
  // Streamed, not replaced: each step's record is on disk as soon as the step ends.
  metrics_ = LineLog(run_dir_ + "/metrics.jsonl", append, "metrics log");
}

void MetricsWriter::write_line(const std::string& text) {
  if (progress_.empty()) {
    std::fprintf(out_, "%s\n", text.c_str());
  } else {  // clear the progress line, print, draw it again below
    std::fprintf(out_, "\r\033[2K%s\n\r\033[2K%s", text.c_str(), progress_.c_str());
  }
}

void MetricsWriter::print(const nlohmann::json& j, const std::string& human) {
  if (json_) {
    std::fprintf(out_, "%s\n", j.dump().c_str());
  } else if (!human.empty()) {
    write_line(human);
  }
  std::fflush(out_);
}

void MetricsWriter::progress(const nlohmann::json& j, const std::string& human, bool last) {
  if (!live_) return record(j, human);
  record(j, "");
  const int64_t now = now_ns();
  const bool due = last || progress_.empty() || now - progress_drawn_ns_ >= 100'000'000;
  progress_ = human;  // what a line printed above it redraws, even between redraws
  if (!due) return;
  progress_drawn_ns_ = now;
  std::fprintf(out_, "\r\033[2K%s", progress_.c_str());
  std::fflush(out_);
}

void MetricsWriter::record(const nlohmann::json& j, const std::string& human) {
  if (metrics_.is_open()) metrics_.write_line(j.dump());
  print(j, human);
}

void MetricsWriter::summary(const nlohmann::json& j, const std::string& human) {
  if (!progress_.empty()) {  // the last progress line stays on screen
    std::fprintf(out_, "\n");
    progress_.clear();
  }
  if (!run_dir_.empty()) {
    atomic_write_file(run_dir_ + "/summary.json", j.dump(2) + "\n");
  }
  print(j, human);
}

void MetricsWriter::discard_summary() {
  if (run_dir_.empty()) return;
  // Only a file is an earlier attempt's summary; anything else would block the new one's write.
  require_replaceable_file(run_dir_ + "/summary.json", "summary");
  std::error_code ec;
  fs::remove(run_dir_ + "/summary.json", ec);
  STRATA_CHECK(!ec, "cannot remove ", run_dir_, "/summary.json of an earlier attempt: ",
               ec.message());
}

bool MetricsWriter::ended(int64_t steps) const {
  if (run_dir_.empty()) return false;
  std::ifstream f(run_dir_ + "/summary.json");
  if (!f) return false;
  // A torn file (killed while writing it) is no proof that the run ended.
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() && j.contains("steps") && j["steps"].is_number_integer() &&
         j["steps"].get<int64_t>() == steps;
}

void MetricsWriter::note(const std::string& human) {
  if (json_) return;
  write_line(human);
  std::fflush(out_);
}

}  // namespace strata::train
