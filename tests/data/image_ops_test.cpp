// tests/data/image_ops_test.cpp: bilinear resize against hand-computed values
// (PyTorch F.interpolate, bilinear, align_corners=false), identity at equal
// size, gray placement, and pad+crop / flip against plain reference loops.
#include "catch2_compat.h"

#include <random>
#include <vector>

#include "engine/data/image_ops.h"

using namespace xrun::data;

namespace {
std::vector<uint8_t> resize(const std::vector<uint8_t>& src, int sh, int sw, int dh, int dw) {
  std::vector<uint8_t> dst(static_cast<size_t>(dh) * dw);
  resize_bilinear(make_resize_plan(sh, sw, dh, dw), src.data(), dst.data());
  return dst;
}
}  // namespace

TEST_CASE("bilinear upsample 2x2 -> 4x4 matches hand-computed values", "[data][resize]") {
  // F.interpolate([[0,100],[200,40]], size=4, bilinear, align_corners=False) =
  // [[0,25,75,100],[50,58.75,76.25,85],[150,126.25,78.75,55],[200,160,80,40]]
  const std::vector<uint8_t> expect = {0,   25,  75, 100, 50,  59,  76, 85,
                                       150, 126, 79, 55,  200, 160, 80, 40};
  CHECK(resize({0, 100, 200, 40}, 2, 2, 4, 4) == expect);
}

TEST_CASE("bilinear downsample and non-integer scale", "[data][resize]") {
  std::vector<uint8_t> src(16);
  for (int i = 0; i < 16; ++i) src[i] = static_cast<uint8_t>(10 * i);
  // 4 -> 2: taps at 0.5 and 2.5, each output the mean of a 2x2 block.
  CHECK(resize(src, 4, 4, 2, 2) == std::vector<uint8_t>{25, 45, 105, 125});
  // 3 -> 2 along x: taps at 0.25 and 1.75.
  CHECK(resize({0, 100, 200}, 1, 3, 1, 2) == std::vector<uint8_t>{25, 175});
}

TEST_CASE("resize at equal size is an exact copy", "[data][resize]") {
  std::mt19937 rng(1);
  std::vector<uint8_t> src(28 * 28);
  for (auto& v : src) v = static_cast<uint8_t>(rng());
  CHECK(resize(src, 28, 28, 28, 28) == src);
}

TEST_CASE("place_image replicates gray to 3 channels", "[data][resize]") {
  const auto plan = make_resize_plan(2, 2, 4, 4);
  std::vector<uint8_t> out(3 * 16);
  place_image(plan, std::vector<uint8_t>{0, 100, 200, 40}.data(), 1, out.data(), 3);
  const auto plane = resize({0, 100, 200, 40}, 2, 2, 4, 4);
  for (int c = 0; c < 3; ++c)
    CHECK(std::vector<uint8_t>(out.begin() + 16 * c, out.begin() + 16 * (c + 1)) == plane);
}

TEST_CASE("pad_crop equals a zero-padded crop for every offset", "[data][augment]") {
  const int c = 2, h = 5, w = 6, pad = 4;
  std::mt19937 rng(7);
  std::vector<uint8_t> src(c * h * w), dst(src.size());
  for (auto& v : src) v = static_cast<uint8_t>(1 + rng() % 255);
  for (int oy = 0; oy <= 2 * pad; ++oy)
    for (int ox = 0; ox <= 2 * pad; ++ox) {
      pad_crop(src.data(), dst.data(), c, h, w, pad, oy, ox);
      for (int ch = 0; ch < c; ++ch)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) {
            const int sy = y + oy - pad, sx = x + ox - pad;
            const uint8_t want =
                sy >= 0 && sy < h && sx >= 0 && sx < w ? src[(ch * h + sy) * w + sx] : 0;
            REQUIRE(dst[(ch * h + y) * w + x] == want);
          }
    }
}

TEST_CASE("hflip mirrors every row", "[data][augment]") {
  std::vector<uint8_t> img = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 2 x 2 x 3
  hflip(img.data(), 2, 2, 3);
  CHECK(img == std::vector<uint8_t>{3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10});
}
