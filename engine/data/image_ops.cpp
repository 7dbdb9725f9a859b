// engine/data/image_ops.cpp: bilinear resize, image placement and the crop /
// flip augmentations (see image_ops.h). Plain loops over uint8 planes; the
// resize taps are precomputed so per-sample work is two lerps per pixel.
#include "engine/data/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace xrun::data {

namespace {

// Taps for one axis, as PyTorch's upsample_bilinear2d with
// align_corners=false: src = (dst + 0.5) * in/out - 0.5, clamped below at 0.
void axis_taps(int in, int out, std::vector<int>& i0, std::vector<int>& i1,
               std::vector<float>& w) {
  i0.resize(out);
  i1.resize(out);
  w.resize(out);
  const double scale = static_cast<double>(in) / out;
  for (int d = 0; d < out; ++d) {
    double s = (d + 0.5) * scale - 0.5;
    if (s < 0) s = 0;
    int lo = std::min(static_cast<int>(s), in - 1);
    i0[d] = lo;
    i1[d] = std::min(lo + 1, in - 1);
    w[d] = static_cast<float>(s - lo);
  }
}

}  // namespace

ResizePlan make_resize_plan(int src_h, int src_w, int dst_h, int dst_w) {
  if (src_h <= 0 || src_w <= 0 || dst_h <= 0 || dst_w <= 0)
    throw std::invalid_argument("make_resize_plan: sizes must be positive");
  ResizePlan p;
  p.src_h = src_h;
  p.src_w = src_w;
  p.dst_h = dst_h;
  p.dst_w = dst_w;
  axis_taps(src_w, dst_w, p.x0, p.x1, p.wx);
  axis_taps(src_h, dst_h, p.y0, p.y1, p.wy);
  return p;
}

void resize_bilinear(const ResizePlan& p, const uint8_t* src, uint8_t* dst) {
  if (p.src_h == p.dst_h && p.src_w == p.dst_w) {
    std::memcpy(dst, src, static_cast<size_t>(p.src_h) * p.src_w);
    return;
  }
  for (int y = 0; y < p.dst_h; ++y) {
    const uint8_t* r0 = src + static_cast<size_t>(p.y0[y]) * p.src_w;
    const uint8_t* r1 = src + static_cast<size_t>(p.y1[y]) * p.src_w;
    const float wy = p.wy[y];
    uint8_t* out = dst + static_cast<size_t>(y) * p.dst_w;
    for (int x = 0; x < p.dst_w; ++x) {
      const int a = p.x0[x], b = p.x1[x];
      const float wx = p.wx[x];
      const float top = r0[a] + wx * (r0[b] - r0[a]);
      const float bot = r1[a] + wx * (r1[b] - r1[a]);
      const float v = top + wy * (bot - top);
      out[x] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }
}

void place_image(const ResizePlan& plan, const uint8_t* src, int src_c, uint8_t* dst,
                 int dst_c) {
  const size_t src_plane = static_cast<size_t>(plan.src_h) * plan.src_w;
  const size_t dst_plane = static_cast<size_t>(plan.dst_h) * plan.dst_w;
  if (src_c == 1) {
    resize_bilinear(plan, src, dst);
    for (int c = 1; c < dst_c; ++c) std::memcpy(dst + c * dst_plane, dst, dst_plane);
    return;
  }
  if (src_c != dst_c) throw std::invalid_argument("place_image: channel counts differ");
  for (int c = 0; c < src_c; ++c) resize_bilinear(plan, src + c * src_plane, dst + c * dst_plane);
}

void pad_crop(const uint8_t* src, uint8_t* dst, int c, int h, int w, int pad, int off_y,
              int off_x) {
  const int dy = off_y - pad, dx = off_x - pad;  // source = dest + (dy, dx)
  const int x_begin = std::clamp(-dx, 0, w), x_end = std::clamp(w - dx, 0, w);
  for (int ch = 0; ch < c; ++ch) {
    const uint8_t* sp = src + static_cast<size_t>(ch) * h * w;
    uint8_t* dp = dst + static_cast<size_t>(ch) * h * w;
    for (int y = 0; y < h; ++y) {
      uint8_t* out = dp + static_cast<size_t>(y) * w;
      const int sy = y + dy;
      if (sy < 0 || sy >= h || x_begin >= x_end) {
        std::memset(out, 0, w);
        continue;
      }
      std::memset(out, 0, x_begin);
      std::memcpy(out + x_begin, sp + static_cast<size_t>(sy) * w + x_begin + dx,
                  x_end - x_begin);
      std::memset(out + x_end, 0, w - x_end);
    }
  }
}

void hflip(uint8_t* chw, int c, int h, int w) {
  for (size_t r = 0, rows = static_cast<size_t>(c) * h; r < rows; ++r)
    std::reverse(chw + r * w, chw + (r + 1) * w);
}

}  // namespace xrun::data
