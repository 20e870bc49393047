// Salvage of truncated JSON. Terms: a "cut point" is a byte offset where the text so far
// is a valid prefix ending right after a complete element of an array or object (just
// before a ',' or just after a closing '}' / ']'); closing every container still open at
// that point yields valid JSON. One scan of the text, O(n); up to kMaxTries parses.
#include "diag/json_salvage.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace strata::diag {

namespace {

struct CutPoint {
  size_t offset;
  std::string open;  // containers open at the cut, outermost first: '{' or '['
};

// Cut points from last to first (at most `limit` of them).
std::vector<CutPoint> find_cut_points(std::string_view text, size_t limit) {
  std::vector<CutPoint> cuts;
  std::string open;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '{':
      case '[': open.push_back(c); break;
      case '}':
      case ']':
        if (open.empty() || (c == '}') != (open.back() == '{')) return {};  // not JSON
        open.pop_back();
        if (!open.empty()) cuts.push_back({i + 1, open});
        break;
      case ',':
        if (!open.empty()) cuts.push_back({i, open});
        break;
      default: break;
    }
  }
  std::vector<CutPoint> last;
  for (size_t k = cuts.size(); k > 0 && last.size() < limit; --k) last.push_back(cuts[k - 1]);
  return last;
}

std::string close_at(std::string_view text, const CutPoint& cut) {
  std::string s(text.substr(0, cut.offset));
  for (size_t k = cut.open.size(); k > 0; --k) s.push_back(cut.open[k - 1] == '{' ? '}' : ']');
  return s;
}

}  // namespace

bool parse_json_salvaging(std::string_view text, ParsedJson& out, std::string& error) {
  try {
    out.value = nlohmann::json::parse(text);
    out.truncated = false;
    return true;
  } catch (const nlohmann::json::parse_error& e) {
    error = cat("not valid JSON (", e.what(), ")");
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at ...".
    if (auto p = error.find("] "); p != std::string::npos) error = "not valid JSON (" + error.substr(p + 2);
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    error = "empty file";
    return false;
  }
  constexpr size_t kMaxTries = 8;
  for (const CutPoint& cut : find_cut_points(text, kMaxTries)) {
    nlohmann::json v = nlohmann::json::parse(close_at(text, cut), nullptr, false);
    if (!v.is_discarded()) {
      out.value = std::move(v);
      out.truncated = true;
      return true;
    }
  }
  return false;
}

bool read_text_file(const std::string& path, std::string& out, std::string& error) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {  // a FIFO would block the open forever
    error = ec ? cat("cannot open (", ec.message(), ")") : "not a regular file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = cat("cannot open (", std::strerror(errno), ")");
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    error = "read error";
    return false;
  }
  out = ss.str();
  return true;
}

}  // namespace strata::diag
