// tests/report/render_test.cpp: the report rendered by a real browser:
// headless Chromium loads it without console errors and paints a screenshot
// that is not blank and shows the charts' palette colours. Skipped, with a
// warning, where Chromium is not installed (CI installs Debian's chromium).
#include <zlib.h>

#include "catch2_compat.h"
#include <cstdint>
#include <set>
#include <sstream>
#include <stdexcept>

#include "report_test_util.h"
#include "runner/atomic_file.h"
#include "runner/report/report.h"
#include "runner/report/svg_chart.h"
#include "skip.h"

namespace {

constexpr uint32_t kWidth = 1400, kHeight = 5000;

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const auto r = xrun_test::run_command(std::string("command -v ") + name);
    if (r.status == 0) return name;
  }
  return "";
}

// Screenshots `html_path` into `png_path`; returns Chromium's log lines
// about the page's console (messages, uncaught errors).
std::string screenshot(const std::string& browser, const xrun_test::ScratchDir& dir,
                       const std::string& html_path, const std::string& png_path) {
  using xrun_test::shell_quote;
  const std::string command =
      "timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --hide-scrollbars" +
      " --user-data-dir=" + shell_quote(dir.file("profile")) + " --enable-logging=stderr --v=0" +
      " --window-size=" + std::to_string(kWidth) + "," + std::to_string(kHeight) +
      " --screenshot=" + shell_quote(png_path) + " " + shell_quote("file://" + html_path);
  // The browser itself crashing (a signal, no timeout) says nothing about the
  // page: seen once at start-up (SIGSEGV after 0.7 s) in CI's ASan run with
  // the suite's other tests beside it. Up to two more tries, each said.
  auto r = xrun_test::run_command(command);
  for (int retry = 0; retry < 2 && r.status > 128 && r.status != 124; ++retry) {
    WARN("Chromium ended by signal " << r.status - 128 << " before any page check; trying again");
    r = xrun_test::run_command(command);
  }
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::istringstream lines(r.output);
  std::string line, console;
  while (std::getline(lines, line))
    if (line.find("CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos)
      console += line + "\n";
  return console;
}

// --- A PNG decoder just big enough for Chromium's screenshots ----------------------------

struct Image {
  uint32_t width = 0, height = 0;
  size_t channels = 0;
  std::vector<uint8_t> pixels;  // rows of width * channels bytes
};

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) |
         uint32_t{static_cast<uint8_t>(s[at + 3])};
}

uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

// Undoes the per-row filters of 8-bit, non-interlaced image data.
void unfilter(const std::vector<uint8_t>& raw, Image& img) {
  const size_t stride = img.width * img.channels, bpp = img.channels;
  img.pixels.assign(stride * img.height, 0);
  for (size_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &img.pixels[y * stride];
    const uint8_t* up = y > 0 ? out - stride : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? out[x - bpp] : 0, b = up ? up[x] : 0,
                c = up && x >= bpp ? up[x - bpp] : 0;
      const int predictor = filter == 1   ? a
                            : filter == 2 ? b
                            : filter == 3 ? (a + b) / 2
                            : filter == 4 ? paeth(a, b, c)
                                          : 0;
      out[x] = static_cast<uint8_t>(in[x] + predictor);
    }
  }
}

Image decode_png(const std::string& png) {
  if (png.size() < 33 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0)
    throw std::runtime_error("not a PNG file");
  Image img;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t length = be32(png, at);
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, length);
    if (type == "IHDR") {
      img.width = be32(data, 0);
      img.height = be32(data, 4);
      if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0)
        throw std::runtime_error("unexpected PNG format");
      img.channels = data[9] == 6 ? 4 : 3;
    }
    if (type == "IDAT") idat += data;
    at += 12 + length;
  }
  std::vector<uint8_t> raw((img.width * img.channels + 1) * img.height);
  uLongf size = raw.size();
  if (uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      size != raw.size())
    throw std::runtime_error("corrupt PNG image data");
  unfilter(raw, img);
  return img;
}

uint32_t rgb(const Image& img, size_t pixel) {
  const uint8_t* p = &img.pixels[pixel * img.channels];
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

uint32_t hex_color(const std::string& hex) {
  return static_cast<uint32_t>(std::stoul(hex.substr(1), nullptr, 16));
}

}  // namespace

TEST_CASE("headless Chromium renders the report: no console errors, charts painted",
          "[report][render]") {
  const std::string browser = chromium();
  if (browser.empty()) {
    XRUN_SKIP("chromium not installed");
  }
  xrun_test::ScratchDir dir;

  // The console check sees errors with this Chromium: a page that has one.
  const std::string faulty = dir.file("faulty.html");
  xrun_test::write_bytes(faulty, "<!DOCTYPE html><p>x</p><script>no_such_function();</script>");
  CHECK_FALSE(screenshot(browser, dir, faulty, dir.file("faulty.png")).empty());

  report_test::build_store(dir.file("sweep.db"));
  xrun::store::Store db(dir.file("sweep.db"));
  const std::string html_path = dir.file("report.html");
  xrun::write_file_atomically(
      html_path, xrun::report::render_report(xrun::report::gather_report(db, {})));
  const std::string png_path = dir.file("report.png");
  const std::string console = screenshot(browser, dir, html_path, png_path);
  CHECK(console == "");

  const Image img = decode_png(xrun_test::read_bytes(png_path));
  CHECK(img.width == kWidth);
  CHECK(img.height == kHeight);
  std::set<uint32_t> colors;
  const uint32_t background = rgb(img, 0);
  size_t painted = 0;
  for (size_t i = 0; i < size_t{img.width} * img.height; ++i) {
    const uint32_t c = rgb(img, i);
    colors.insert(c);
    painted += c != background;
  }
  CHECK(colors.size() > 50);                             // text, lines, fills
  CHECK(painted > size_t{img.width} * img.height / 10);  // cards on the background
  size_t palette_seen = 0;
  for (const std::string& hex : xrun::report::palette())
    palette_seen += colors.count(hex_color(hex));
  CHECK(palette_seen >= 6);  // the runs' and series' colours, as filled marks
}
