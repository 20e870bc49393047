// The report as a person sees it: headless Chromium (Debian's `chromium`, installed by
// `make test`) renders it; no console errors, and the screenshot shows the charts: each
// chart's plot area (its #fafafa background) is found as a block and holds drawn pixels.
#include <gtest/gtest.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "../train/cli_util.h"
#include "core/error.h"
#include "report_util.h"

namespace strata::test {
namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> rgba;
  uint32_t px(int x, int y) const {
    const uint8_t* p = &rgba[(size_t(y) * size_t(w) + size_t(x)) * 4];
    return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
  }
};

bool read_png(const std::string& path, Image& img) {
  png_image pi{};
  pi.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&pi, path.c_str())) return false;
  pi.format = PNG_FORMAT_RGBA;
  img.w = int(pi.width);
  img.h = int(pi.height);
  img.rgba.resize(PNG_IMAGE_SIZE(pi));
  const bool ok = png_image_finish_read(&pi, nullptr, img.rgba.data(), 0, nullptr) != 0;
  png_image_free(&pi);
  return ok;
}

// A coloured pixel: data (series, bars), not background, grid, frame or text (all grey).
bool coloured(uint32_t rgb) {
  const int r = int(rgb >> 16), g = int(rgb >> 8 & 255), b = int(rgb & 255);
  return std::max({r, g, b}) - std::min({r, g, b}) > 40;
}

bool have_chromium() { return std::system("command -v chromium >/dev/null 2>&1") == 0; }

// Renders `html` to `png`; returns Chromium's log (console messages appear as
// ":INFO:CONSOLE" lines).
std::string screenshot(const std::string& html, const std::string& png, int width, int height,
                       const std::string& scratch) {
  const std::string log = scratch + "/chromium.log";
  const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu "
                          "--hide-scrollbars --no-first-run --user-data-dir=" + scratch +
                          "/profile --enable-logging=stderr --v=0 --window-size=" +
                          std::to_string(width) + "," + std::to_string(height) +
                          " --screenshot=" + png + " file://" + html + " >/dev/null 2>" + log;
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << read_file(log);
  return read_file(log);
}

std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> out;
  std::stringstream ss(log);
  for (std::string line; std::getline(ss, line);)
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
  return out;
}

// Plot areas: rectangles of plot pixels (the plot background #fafafa, its grid lines
// #e4e4e4, or data colours), found by scanning rows for runs of 200 or more of them; the
// page around the charts is white, with grey text and table borders. Returns
// (x0, y0, x1, y1) per block.
std::vector<std::array<int, 4>> plot_blocks(const Image& img) {
  auto plot_px = [&](int x, int y) {
    const uint32_t c = img.px(x, y);
    return c == 0xfafafa || c == 0xe4e4e4 || coloured(c);
  };
  std::vector<std::array<int, 4>> blocks;
  std::vector<int> open(size_t(img.w), -1);  // block index by left edge of a run
  for (int y = 0; y < img.h; ++y) {
    int x = 0;
    while (x < img.w) {
      if (!plot_px(x, y)) { ++x; continue; }
      int e = x;
      while (e < img.w && plot_px(e, y)) ++e;
      if (e - x >= 200) {  // part of a plot area: extend a block that touches it
        bool joined = false;
        for (auto& b : blocks)
          if (b[3] >= y - 40 && x < b[2] && e > b[0]) {  // rows cut by lines still belong
            b[0] = std::min(b[0], x), b[2] = std::max(b[2], e), b[3] = y, joined = true;
            break;
          }
        if (!joined) blocks.push_back({x, y, e, y});
      }
      x = e;
    }
  }
  std::vector<std::array<int, 4>> big;
  for (auto& b : blocks)
    if (b[3] - b[1] >= 80) big.push_back(b);
  return big;
}

TEST(ReportRender, ChromiumShowsTheChartsWithoutConsoleErrors) {
  if (!have_chromium()) GTEST_SKIP() << "SKIPPED: chromium is not installed (make test installs it)";
  TempDir dir("render");
  write_synthetic_run(dir.file("run"), 200);
  RunResult r = run_strata("report " + (dir.file("run")) + " -o " + (dir.file("report.html")), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string png = dir.file("shot.png");
  const std::string log = screenshot(dir.file("report.html"), png, 1600, 4200, dir.str());
  EXPECT_TRUE(console_lines(log).empty()) << log;
  Image img;
  ASSERT_TRUE(read_png(png, img)) << "cannot decode " << png;
  const auto blocks = plot_blocks(img);
  // loss, tokens/s, MFU, step split, comm wait, overlap, memory, checkpoint stalls
  std::string where;
  for (const auto& b : blocks) where += cat(b[0], ",", b[1], "-", b[2], ",", b[3], " ");
  EXPECT_GE(blocks.size(), 8u) << "plot areas found in the screenshot: " << where;
  for (const auto& b : blocks) {
    int drawn = 0;  // data pixels inside the plot area
    for (int y = b[1]; y <= b[3]; ++y)
      for (int x = b[0]; x < b[2]; ++x) drawn += coloured(img.px(x, y));
    EXPECT_GT(drawn, 300) << "blank plot area at " << b[0] << "," << b[1] << " - " << b[2] << "," << b[3];
  }
  // The first run's colour (loss and throughput lines) is on screen.
  int blue = 0;
  for (int y = 0; y < img.h; ++y)
    for (int x = 0; x < img.w; ++x) blue += img.px(x, y) == 0x1f77b4;
  EXPECT_GT(blue, 500);
}

// The checks above can fail: a page with a script error and an empty chart fails both.
TEST(ReportRender, TheChecksCatchErrorsAndBlankCharts) {
  if (!have_chromium()) GTEST_SKIP() << "SKIPPED: chromium is not installed (make test installs it)";
  TempDir dir("render_bad");
  std::ofstream(dir.file("bad.html"))
      << "<!DOCTYPE html><html><body><svg width=\"700\" height=\"300\"><rect x=\"10\" y=\"10\" "
         "width=\"600\" height=\"200\" fill=\"#fafafa\"/></svg><script>nothing_here();</script></body></html>";
  const std::string png = dir.file("bad.png");
  const std::string log = screenshot(dir.file("bad.html"), png, 800, 400, dir.str());
  EXPECT_FALSE(console_lines(log).empty()) << log;
  Image img;
  ASSERT_TRUE(read_png(png, img));
  const auto blocks = plot_blocks(img);
  ASSERT_EQ(blocks.size(), 1u);
  int drawn = 0;
  for (int y = blocks[0][1]; y <= blocks[0][3]; ++y)
    for (int x = blocks[0][0]; x < blocks[0][2]; ++x) drawn += coloured(img.px(x, y));
  EXPECT_EQ(drawn, 0);
}

}  // namespace
}  // namespace strata::test
