#include "train/metrics.h"

#include <cstdarg>
#include <filesystem>

#include "core/error.h"
#include "nlohmann/json.hpp"

namespace strata::train {

namespace fs = std::filesystem;

MetricsWriter::MetricsWriter(const std::string& run_dir, bool json_stdout, std::FILE* out,
                             bool append)
    : run_dir_(run_dir), json_(json_stdout), out_(out) {
  if (run_dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  STRATA_CHECK(!ec && fs::is_directory(run_dir_), "cannot create run directory ", run_dir_, ": ",
               ec ? ec.message() : "a file of that name exists");
  std::string path = run_dir_ + "/metrics.jsonl";
  metrics_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  STRATA_CHECK(metrics_.is_open(), "cannot write ", path, " (run directory not writable?)");
}

void MetricsWriter::print(const nlohmann::json& j, const std::string& human) {
  if (json_) {
    std::fprintf(out_, "%s\n", j.dump().c_str());
  } else if (!human.empty()) {
    std::fprintf(out_, "%s\n", human.c_str());
  }
  std::fflush(out_);
}

void MetricsWriter::record(const nlohmann::json& j, const std::string& human) {
  if (metrics_.is_open()) {
    metrics_ << j.dump() << '\n';
    metrics_.flush();
    STRATA_CHECK(metrics_.good(), "writing ", run_dir_, "/metrics.jsonl failed (disk full?)");
  }
  print(j, human);
}

void MetricsWriter::summary(const nlohmann::json& j, const std::string& human) {
  if (!run_dir_.empty()) {
    std::string path = run_dir_ + "/summary.json";
    std::ofstream f(path, std::ios::out | std::ios::trunc);
    f << j.dump(2) << '\n';
    f.close();
    STRATA_CHECK(!f.fail(), "cannot write ", path);
  }
  print(j, human);
}

void MetricsWriter::note(const std::string& human) {
  if (json_) return;
  std::fprintf(out_, "%s\n", human.c_str());
  std::fflush(out_);
}

std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

}  // namespace strata::train
