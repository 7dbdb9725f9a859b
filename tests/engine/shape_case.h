// tests/engine/shape_case.h: one case of the shape matrix (an architecture,
// an image size, a batch), shared by the CPU engine's matrix
// (shape_matrix_test.cpp) and the GPU's against it (tests/cuda): the model
// spec, and the batch both backends are given (seeded by the shape).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/resnet.h"

namespace xrun::testing {

inline ModelSpec shape_spec(const std::string& arch, int64_t size, int64_t batch) {
  ModelSpec spec;
  spec.arch = arch;
  spec.num_classes = 10;
  spec.batch = batch;
  spec.image_size = size;
  return spec;
}

// Weights from seed 7, normal images and labels 0, 1, 2, ... written to
// `model` (allocated on `be`).
inline void write_shape_batch(Backend& be, ResNet& model, int64_t size, int64_t batch) {
  model.init_parameters(7);
  std::mt19937 g(static_cast<uint32_t>(size * 10 + batch));
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(model.input()->numel()));
  for (float& v : x) v = normal(g);
  be.write(model.input(), x);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  be.write_labels(labels);
}

}  // namespace xrun::testing
