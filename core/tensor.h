// core/tensor.h: a tensor owned by a backend. Its dims are canonical
// (torchvision's order: NCHW activations, OIHW conv weights, [out, in] linear
// weights); the bytes behind `data` are in whatever layout the backend keeps
// (oneDNN blocked formats, NHWC on the GPU). Values cross the Backend
// interface in canonical layout only (Backend::write / Backend::read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace xrun {

enum class DType : uint8_t { f32, f16, bf16, i32, u8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

// What a tensor is for; the memory plan puts each role in its own region.
enum class TensorRole : uint8_t {
  parameter,   // trained weights (flat region, mirrored by `gradient`)
  gradient,    // parameter gradients, same offsets as the parameters
  state,       // BN running statistics: saved, never trained
  activation,  // forward outputs kept for backward
  activation_grad,  // gradients of activations
  workspace,   // per-op data kept from forward to backward (ReLU masks, pool indices)
  io,          // input images and labels
};

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  DType dtype = DType::f32;
  TensorRole role = TensorRole::activation;
  size_t bytes = 0;         // size in the backend's layout (padding included)
  size_t offset = 0;        // within its role's region
  void* data = nullptr;     // bound when the memory plan is allocated

  virtual ~Tensor() = default;
  int64_t numel() const {
    return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  }
};

}  // namespace xrun
