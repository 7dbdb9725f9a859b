// engine/cuda/cudnn_compat.h: what differs between the cuDNN versions xrun
// builds against (8.9 and 9.x, by CUDNN_MAJOR), in one place, as
// engine/cpu/dnnl_compat.h does for oneDNN 2 and 3. Everything else xrun
// calls (the legacy convolution, batch norm, pooling and tensor APIs) is in
// both.
#pragma once

#include <cudnn.h>

#include <cstddef>

#if CUDNN_MAJOR < 8 || (CUDNN_MAJOR == 8 && CUDNN_MINOR < 9)
#error "xrun's CUDA engine needs cuDNN 8.9 or newer"
#endif

namespace xrun::cuda::cudnn_compat {

// cuDNN's message for the last failed call on this thread, or "" where
// this cuDNN keeps none (8.x: its status string is all there is).
inline void last_error_string(char* out, size_t size) {
  if (size == 0) return;
  out[0] = '\0';
#if CUDNN_MAJOR >= 9
  cudnnGetLastErrorString(out, size);
#endif
}

}  // namespace xrun::cuda::cudnn_compat
