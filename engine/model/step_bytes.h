// engine/model/step_bytes.h: the least memory traffic of each layer and pass
// of a training step, counted from the model's layer shapes
// (ResNet::layer_shapes()): every tensor the pass must read or write, touched
// once, at `element_bytes` per element (4 for fp32/tf32, 2 for fp16/bf16).
// With step_flops.h it places each layer on a roofline (arithmetic
// intensity = FLOPs / bytes). The rules, x the input, y the output, w the
// weights, d the gradients:
//
//   convolution   forward x + w + y; backward-data dy + w + dx (none for
//                 conv1); backward-weights x + dy + dw
//   linear (fc)   the same, the bias with the weights
//   batch norm    forward x + y, + the residual for a fused add, + scale and
//                 shift; backward x + dy + dx, + y for a fused ReLU's mask,
//                 + the scale and shift gradients
//   max pool      forward x + y; backward x + dy + dx (the argmax re-found)
//   avg pool      forward x + y; backward dy + dx
//   residual      backward: the two gradients read, their sum written
//   loss          forward logits read, probabilities written; backward
//                 probabilities read, logit gradients written
//
// Caches can only lower what a pass moves below this when a tensor stays in
// them between passes; the optimizer and data loading are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/resnet.h"

namespace xrun {

// One layer's least traffic in one pass, the passes named as in
// LayerFlops ("forward", "backward_data", "backward_weights", "backward").
struct LayerBytes {
  std::string layer;
  std::string pass;
  double bytes = 0;
};

std::vector<LayerBytes> count_layer_bytes(const std::vector<LayerShape>& layers, int element_bytes);

}  // namespace xrun
