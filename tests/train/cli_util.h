// Running the built `strata` binary from tests: exit status, stdout, stderr.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::test {

struct CliResult {
  int status = -1;       // exit status; -1 when killed by a signal
  std::string out, err;  // stdout, stderr
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory under the temp dir, removed with the object.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("strata_tr_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& leaf) const { return (path / leaf).string(); }
};

// Runs `strata <args>` through the shell (args and env, e.g. "VAR=1 ", are trusted test
// strings).
inline CliResult run_strata(const std::string& args, const std::string& env = "") {
  TempDir io("io");
  std::string cmd = env + std::string(STRATA_BINARY) + " " + args + " >" + (io / "out") +
                    " 2>" + (io / "err");
  int rc = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(io / "out");
  r.err = slurp(io / "err");
  return r;
}

// The JSON objects of a .jsonl file (or stdout of --json), one per line.
inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) out.push_back(nlohmann::json::parse(text.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

// An llm.c version-1 token file with a header we may corrupt.
inline void write_bin_file(const std::string& path, const std::vector<uint16_t>& tokens,
                           int32_t magic = 20240520, int32_t version = 1, int64_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(count >= 0 ? count : int64_t(tokens.size()));
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  f.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
}

// Every state's block hashes in a checkpoint, in manifest order: equal iff the bytes are.
inline std::vector<std::string> state_hashes(const std::string& step_dir) {
  std::ifstream in(step_dir + "/manifest.json");
  if (!in) return {"missing " + step_dir};
  nlohmann::json m = nlohmann::json::parse(in);
  std::vector<std::string> out;
  for (const nlohmann::json& shard : m["shards"])
    for (const nlohmann::json& p : shard["pieces"]) out.push_back(p.dump());
  return out;
}

}  // namespace strata::test
