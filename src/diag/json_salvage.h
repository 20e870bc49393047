// Reading JSON written by a process that may have died mid-write. A dump cut off at byte N
// is closed at its last complete element (every open array and object gets its closer), so
// the entries written before the cut stay usable; text that is not JSON at all is refused.
#pragma once
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace strata::diag {

struct ParsedJson {
  nlohmann::json value;
  bool truncated = false;  // the text was cut off and closed at its last complete element
};

// Parses `text`; on failure tries to close a truncated document. Returns false and sets
// `error` (e.g. "not valid JSON: syntax error at byte 120") when neither works.
bool parse_json_salvaging(std::string_view text, ParsedJson& out, std::string& error);

// Reads a whole file; false with `error` set when it cannot be read.
bool read_text_file(const std::string& path, std::string& out, std::string& error);

}  // namespace strata::diag
