// The one reader of the floating-point numbers a person types: every floating-point flag,
// config key and list item (a mixture weight, a --rope-scaling factor) goes through it, so
// they all refuse the same things in the same words.
//
// A setting is a finite fp32 number: most of them land in float fields, and none means
// anything beyond the float range. So the reader refuses, by the text as typed:
//   - anything that is not a number whole ("abc", "1.5x", ""),
//   - nan, inf, and a value past 3.4e38 (1e400 parses as inf),
//   - a nonzero value below the smallest normal float, 1.2e-38, which would round to 0 or
//     lose its digits (1e-300 would reach a float field as 0, and then be judged as 0).
// A range (positive, in [0, 1), ...) is judged on the value and reported with the text too.
#pragma once
#include <limits>
#include <string>
#include <vector>

namespace strata {

// [lo, hi] with either end open; the default is any finite number.
struct NumberRange {
  double lo = -std::numeric_limits<float>::max();
  double hi = std::numeric_limits<float>::max();
  bool lo_open = false, hi_open = false;

  static NumberRange positive() { return {0, std::numeric_limits<float>::max(), true, false}; }
  static NumberRange non_negative() { return {0, std::numeric_limits<float>::max(), false, false}; }
  bool contains(double v) const;
  std::string describe() const;  // "positive", ">= 0", "in [0, 1)"
};

// Why `text` is not a finite number in `range`, as "TEXT is ..." for the caller to put after
// the flag or key ("--rope-theta: 1e-300 is too close to 0 to hold (...)"), or "" when it is
// one; its value is then std::strtod(text).
std::string number_problem(const std::string& text, NumberRange range = {});

// The fields of a list typed as A,B,... (a mixture, a --rope-scaling tuple): every one, empty
// ones included, so a leading, trailing or doubled separator reaches its reader as an empty
// field to refuse.
std::vector<std::string> split_fields(const std::string& text, char sep = ',');

}  // namespace strata
