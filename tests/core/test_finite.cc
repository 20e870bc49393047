// core/finite.h: the one reader of typed floating-point numbers. Each text is judged by what
// was typed, and the reason quotes it.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>

#include "core/finite.h"

namespace strata {
namespace {

TEST(Finite, RefusesWhatAFloatCannotHoldByItsText) {
  const std::pair<const char*, const char*> refused[] = {
      {"", "'' is not a number"},          {" 1", " 1 is not a number"},
      {"abc", "abc is not a number"},      {"1.5x", "1.5x is not a number"},
      {"nan", "nan is not a number"},      {"-nan", "-nan is not a number"},
      {"inf", "inf is not finite"},        {"-infinity", "-infinity is not finite"},
      {"1e400", "1e400 is not finite"},    {"3.5e38", "3.5e38 is past 3.4e38"},
      {"1e-300", "1e-300 is too close to 0"}, {"1e-400", "1e-400 is too close to 0"},
      {"-1e-39", "-1e-39 is too close to 0"}, {"0x1p-2000", "0x1p-2000 is too close to 0"},
  };
  for (const auto& [text, why] : refused) {
    const std::string p = number_problem(text);
    EXPECT_EQ(p.rfind(why, 0), 0u) << "'" << text << "': " << p;
  }
  for (const char* ok : {"0", "-0", "0.0e5", "1.2e-38", "3.4e38", "-2.5", "1E3", "0x10", "+7"})
    EXPECT_EQ(number_problem(ok), "") << ok;
}

TEST(Finite, RangesAreReportedWithTheTextTyped) {
  EXPECT_EQ(number_problem("0", NumberRange::positive()), "0 is not positive");
  EXPECT_EQ(number_problem("-0.000", NumberRange::positive()), "-0.000 is not positive");
  EXPECT_EQ(number_problem("-1e-3", NumberRange::non_negative()), "-1e-3 is not >= 0");
  EXPECT_EQ(number_problem("1", NumberRange{0, 1, false, true}), "1 is not in [0, 1)");
  EXPECT_EQ(number_problem("0.5", NumberRange{1, std::numeric_limits<float>::max()}), "0.5 is not >= 1");
  EXPECT_EQ(number_problem("0.999", NumberRange{0, 1, false, true}), "");
  // The reader's own refusals come first: 1e-300 is not judged as 0.
  EXPECT_EQ(number_problem("1e-300", NumberRange::positive()).rfind("1e-300 is too close to 0", 0), 0u);
}

}  // namespace
}  // namespace strata
