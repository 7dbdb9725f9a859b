// engine/cuda/layout.cu: layout and type conversions: canonical fp32 NCHW
// (and OIHW) <-> NHWC (and KRSC) in the activation type with padded
// channels; plain casts; uint8 image batches -> normalised NHWC input.
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

size_t element_size(DataType t) { return t == DataType::f32 ? 4 : 2; }

namespace {

template <class T>
__global__ void nchw_to_nhwc_kernel(const float* src, T* dst, int64_t n, int64_t c, int64_t hw,
                                    int64_t c_pad) {
  const int64_t total = n * hw * c_pad;
  XRUN_GRID_LOOP(i, total) {  // i indexes the destination
    const int64_t ch = i % c_pad;
    const int64_t pos = (i / c_pad) % hw;
    const int64_t img = i / (c_pad * hw);
    dst[i] = from_float<T>(ch < c ? src[(img * c + ch) * hw + pos] : 0.0f);
  }
}

template <class T>
__global__ void nhwc_to_nchw_kernel(const T* src, float* dst, int64_t n, int64_t c, int64_t hw,
                                    int64_t c_pad) {
  const int64_t total = n * c * hw;
  XRUN_GRID_LOOP(i, total) {  // i indexes the destination
    const int64_t pos = i % hw;
    const int64_t ch = (i / hw) % c;
    const int64_t img = i / (hw * c);
    dst[i] = to_float(src[(img * hw + pos) * c_pad + ch]);
  }
}

template <class T>
__global__ void cast_from_float_kernel(const float* src, T* dst, int64_t count) {
  XRUN_GRID_LOOP(i, count) dst[i] = from_float<T>(src[i]);
}

template <class T>
__global__ void cast_to_float_kernel(const T* src, float* dst, int64_t count) {
  XRUN_GRID_LOOP(i, count) dst[i] = to_float(src[i]);
}

template <class T>
__global__ void normalize_kernel(const uint8_t* images, T* dst, int64_t n, int64_t count,
                                 int64_t c, int64_t h, int64_t w, int64_t c_pad,
                                 Normalisation norm, Augmentation aug) {
  const int64_t hw = h * w;
  const int64_t total = n * hw * c_pad;
  XRUN_GRID_LOOP(i, total) {
    const int64_t ch = i % c_pad;
    const int64_t pos = (i / c_pad) % hw;
    const int64_t img = i / (c_pad * hw);
    float x = 0.0f;
    if (img < count && ch < c) {
      int64_t y = pos / w, col = pos % w;
      bool inside = true;
      if (aug.draws) {  // flip the output column, then shift into the padded source
        const int32_t* d = aug.draws + 3 * img;
        if (aug.hflip && d[2]) col = w - 1 - col;
        if (aug.random_crop) {
          y += d[0] - aug.pad;
          col += d[1] - aug.pad;
          inside = y >= 0 && y < h && col >= 0 && col < w;
        }
      }
      const float pixel = inside ? images[(img * c + ch) * hw + y * w + col] : 0.0f;
      x = pixel * norm.scale[ch] + norm.shift[ch];
    }
    dst[i] = from_float<T>(x);
  }
}

}  // namespace

void nchw_to_nhwc(const float* src, void* dst, DataType dt, int64_t n, int64_t c, int64_t h,
                  int64_t w, int64_t c_pad, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t total = n * h * w * c_pad;
    nchw_to_nhwc_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        src, static_cast<T*>(dst), n, c, h * w, c_pad);
    XRUN_CHECK_LAUNCH();
  });
}

void nhwc_to_nchw(const void* src, DataType dt, float* dst, int64_t n, int64_t c, int64_t h,
                  int64_t w, int64_t c_pad, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t total = n * c * h * w;
    nhwc_to_nchw_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(src), dst, n, c, h * w, c_pad);
    XRUN_CHECK_LAUNCH();
  });
}

void cast_from_float(const float* src, void* dst, DataType dt, int64_t count,
                     cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cast_from_float_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
        src, static_cast<T*>(dst), count);
    XRUN_CHECK_LAUNCH();
  });
}

void cast_to_float(const void* src, DataType dt, float* dst, int64_t count, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cast_to_float_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const T*>(src), dst, count);
    XRUN_CHECK_LAUNCH();
  });
}

void normalize_images(const uint8_t* images, void* dst, DataType dt, int64_t n, int64_t count,
                      int64_t c, int64_t h, int64_t w, int64_t c_pad, const Normalisation& norm,
                      const Augmentation& augment, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t total = n * h * w * c_pad;
    normalize_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        images, static_cast<T*>(dst), n, count, c, h, w, c_pad, norm, augment);
    XRUN_CHECK_LAUNCH();
  });
}

}  // namespace xrun::cuda
