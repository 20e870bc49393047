#include "core/finite.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>


namespace strata {
namespace {

std::string shown(const std::string& text) { return text.empty() ? "''" : text; }

std::string bound(double v) {
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

}  // namespace

bool NumberRange::contains(double v) const {
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string NumberRange::describe() const {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (hi >= kMax && lo == 0) return lo_open ? "positive" : ">= 0";
  if (hi >= kMax) return (lo_open ? "> " : ">= ") + bound(lo);
  if (lo <= -kMax) return (hi_open ? "< " : "<= ") + bound(hi);
  return std::string("in ") + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) + (hi_open ? ")" : "]");
}

std::string number_problem(const std::string& text, NumberRange range) {
  const std::string t = shown(text);
  // strtod skips leading blanks; a number typed whole has none.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return t + " is not a number";
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return t + " is not a number";
  if (std::isnan(v)) return t + " is not a number";
  constexpr float kMax = std::numeric_limits<float>::max(), kMin = std::numeric_limits<float>::min();
  if (std::isinf(v)) return t + " is not finite";
  if (std::abs(v) > kMax) return t + " is past 3.4e38, the largest number a setting holds";
  // Underflow: strtod gives 0 or a denormal with ERANGE; a float holds no nonzero below kMin.
  const bool nonzero_text = text.find_first_of("123456789") < text.find_first_of("eE");
  if ((v != 0 && std::abs(v) < kMin) || (v == 0 && nonzero_text))
    return t + " is too close to 0 to hold (a nonzero number must be at least 1.2e-38)";
  if (!range.contains(v)) return t + " is not " + range.describe();
  return "";
}

std::vector<std::string> split_fields(const std::string& text, char sep) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(sep, at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace strata
