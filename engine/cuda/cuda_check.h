// engine/cuda/cuda_check.h: the one place that checks CUDA runtime, cuDNN and
// cuBLAS status codes. Every call goes through CUDA_CHECK / CUDNN_CHECK /
// CUBLAS_CHECK, which throw CudaError naming the call, file and line and the
// library's own message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

#include "engine/cuda/cudnn_compat.h"

namespace xrun::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const char* file,
                                   int line, const std::string& message);
const char* cublas_status_name(cublasStatus_t status);

}  // namespace xrun::cuda

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t xrun_status_ = (call);                                                \
    if (xrun_status_ != cudaSuccess)                                                        \
      ::xrun::cuda::throw_cuda_error("CUDA", #call, __FILE__, __LINE__,                     \
                                     std::string(cudaGetErrorName(xrun_status_)) + ": " +   \
                                         cudaGetErrorString(xrun_status_));                 \
  } while (0)

#define CUDNN_CHECK(call)                                                                   \
  do {                                                                                      \
    const cudnnStatus_t xrun_status_ = (call);                                              \
    if (xrun_status_ != CUDNN_STATUS_SUCCESS) {                                             \
      char xrun_last_[512] = {0};                                                           \
      ::xrun::cuda::cudnn_compat::last_error_string(xrun_last_, sizeof xrun_last_);         \
      ::xrun::cuda::throw_cuda_error("cuDNN", #call, __FILE__, __LINE__,                    \
                                     std::string(cudnnGetErrorString(xrun_status_)) +       \
                                         (xrun_last_[0] ? std::string(" (") + xrun_last_ +  \
                                                              ")"                           \
                                                        : std::string()));                  \
    }                                                                                       \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const cublasStatus_t xrun_status_ = (call);                                             \
    if (xrun_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::xrun::cuda::throw_cuda_error("cuBLAS", #call, __FILE__, __LINE__,                   \
                                     ::xrun::cuda::cublas_status_name(xrun_status_));       \
  } while (0)
