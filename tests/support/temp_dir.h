// A fresh directory for one test, removed with the object.
#pragma once
#include <filesystem>
#include <string>

namespace strata::test {

// <temp>/strata-<Suite>.<Test>-<tag>-XXXXXX, created empty (mkdtemp, so parallel test
// processes never share one) and removed with everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The whole file (binary), or "" when it cannot be read.
std::string read_file(const std::string& path);
// Creates or truncates `path` with `text`.
void write_file(const std::string& path, const std::string& text);

}  // namespace strata::test
