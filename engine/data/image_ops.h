// engine/data/image_ops.h: the pixel operations the data sources and the
// loader share: bilinear resize (PyTorch's F.interpolate, bilinear,
// align_corners=false, no antialias), placing a stored image into the size
// and channel count a run asks for, and the two training augmentations
// (zero-pad + crop, horizontal flip). All work on CHW uint8 planes.
#pragma once

#include <cstdint>
#include <vector>

namespace xrun::data {

// Source taps and weights for resizing src_h x src_w planes to dst_h x dst_w,
// computed once per dataset. Equal sizes give an exact copy.
struct ResizePlan {
  int src_h = 0, src_w = 0, dst_h = 0, dst_w = 0;
  std::vector<int> x0, x1, y0, y1;   // per output column / row: the two taps
  std::vector<float> wx, wy;         // weight of the second tap
};
ResizePlan make_resize_plan(int src_h, int src_w, int dst_h, int dst_w);

// One plane: src is src_h x src_w, dst is dst_h x dst_w; rounded to nearest.
void resize_bilinear(const ResizePlan& plan, const uint8_t* src, uint8_t* dst);

// Places a stored src_c x src_h x src_w image into dst_c x dst_h x dst_w
// (plan's sizes): resized when the sizes differ, a gray image (src_c == 1)
// replicated to every output channel. src_c must be 1 or equal dst_c.
void place_image(const ResizePlan& plan, const uint8_t* src, int src_c, uint8_t* dst,
                 int dst_c);

// Pads each plane with `pad` zero pixels on every side and crops h x w back
// out at offset (off_y, off_x) in [0, 2*pad]: dst(y, x) = src(y+off_y-pad,
// x+off_x-pad), zero outside. src and dst must not overlap.
void pad_crop(const uint8_t* src, uint8_t* dst, int c, int h, int w, int pad, int off_y,
              int off_x);

// Mirrors every row of every plane in place.
void hflip(uint8_t* chw, int c, int h, int w);

}  // namespace xrun::data
