// core/resnet_shapes.h: the feature-map sides of the ResNet family (every
// torchvision resnet has the same strides: conv1 7x7/2 pad 3, max pool 3x3/2
// pad 1, then a 3x3/2 pad 1 entry into each of layer2-4), so the runner can
// judge a run's shapes before any model is built, and the model checks the
// same rule with the same arithmetic.
#pragma once

#include <cstdint>
#include <string>

namespace xrun {

// The output side of a square convolution or pooling window.
constexpr int64_t window_output(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

// The side of layer4's maps (the smallest the model's batch norms see) for
// square images of `image_size`.
constexpr int64_t resnet_layer4_side(int64_t image_size) {
  int64_t s = window_output(image_size, 7, 2, 3);  // conv1
  s = window_output(s, 3, 2, 1);                    // max pool
  for (int stage = 1; stage < 4; ++stage) s = window_output(s, 3, 2, 1);
  return s;
}

// Why a training batch of `batch` images of `image_size` cannot train (""
// when it can): batch norm over one value per channel has zero variance
// (PyTorch refuses it: "Expected more than 1 value per channel when
// training").
inline std::string resnet_training_shape_problem(int64_t batch, int64_t image_size) {
  const int64_t side = resnet_layer4_side(image_size);
  if (batch * side * side > 1) return "";
  return "layer4's batch norms would see 1 value per channel (batch " + std::to_string(batch) +
         ", " + std::to_string(side) + "x" + std::to_string(side) + " maps from " +
         std::to_string(image_size) + "x" + std::to_string(image_size) +
         " images): batch statistics need more than one value; use a batch of 2 or more, or "
         "images of 33x33 or larger";
}

}  // namespace xrun
