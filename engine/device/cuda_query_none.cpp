// engine/device/cuda_query_none.cpp: query_cuda() for builds without the CUDA
// toolkit (XRUN_CUDA=OFF or no toolkit found): says so, and still reports the
// NVIDIA driver release when NVML is present, so `xrun doctor` can tell a
// user with a GPU that this build cannot use it.
#include "engine/device/device_info.h"

namespace xrun {

CudaInfo query_cuda() {
  CudaInfo info;
  info.compiled_with_cuda = false;
  info.driver_release = nvml_driver_release();
  info.status = info.driver_release.empty()
                    ? "xrun was built without CUDA support"
                    : "xrun was built without CUDA support (NVIDIA driver " + info.driver_release +
                          " is installed: rebuild with the CUDA toolkit and cuDNN)";
  return info;
}

}  // namespace xrun
