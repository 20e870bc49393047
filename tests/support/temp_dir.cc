#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <stdexcept>

namespace strata::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& tag) {
  std::string name = "strata-";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name += std::string(info->test_suite_name()) + "." + info->name();
  else
    name += "test";
  if (!tag.empty()) name += "-" + tag;
  for (char& c : name)
    if (c == '/') c = '_';  // parameterised test names
  std::string tmpl = (fs::temp_directory_path() / (name + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a directory like " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace strata::test
