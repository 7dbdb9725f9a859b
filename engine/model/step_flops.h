// engine/model/step_flops.h: the floating-point work of one training step,
// counted from the model's own layer shapes (ResNet::layer_shapes()), per
// layer and pass, by these rules (a multiply-add is 2 FLOPs):
//
//   convolution   MACs = N * K * OH * OW * C * R * S; forward, backward-data
//                 and backward-weights 2 * MACs each; no backward-data where
//                 the input needs no gradient (conv1: the image)
//   linear (fc)   forward 2 * N * in * out + N * out (the bias);
//                 backward-data 2 * N * in * out; backward-weights
//                 2 * N * in * out + N * out (the bias gradient's sum)
//   batch norm    per element, training: forward 8 (mean 1, variance 3,
//                 normalise 2, scale and shift 2), + 1 for a fused ReLU,
//                 + 2 for a fused residual add and ReLU; backward 9 (the two
//                 sums 3, the normalised input again 2, dx 4), + 1 for the
//                 ReLU mask (fused ReLU or add + ReLU)
//   max pool      forward R * S - 1 comparisons per output element;
//                 backward 1 per output element (its gradient added in)
//   avg pool      forward 1 per input element + 1 per output (the divide);
//                 backward 1 per input element
//   residual      backward: 1 per element (the block input's two gradients
//                 added)
//   loss          softmax cross-entropy on fc's output: forward 4 per logit,
//                 backward 3 per logit
//   optimizer     per parameter, once per step: AdamW 15 (both moments 7,
//                 the update 8); SGD 2, + 2 with weight decay, + 2 with
//                 momentum, + 2 more for Nesterov
//
// Evaluation passes, data loading and casts (bf16 copies of the weights) are
// not counted. Torchvision's and fvcore's published figures count the
// forward convolutions and linear layer only, in MACs: forward_macs() is
// that figure (ResNet50 at 224x224, 1000 classes: 4.09 G).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/resnet.h"

namespace xrun {

// One layer's FLOPs in one pass: "forward", "backward_data",
// "backward_weights" (convolutions and fc) or "backward" (the rest).
struct LayerFlops {
  std::string layer;
  std::string pass;
  double flops = 0;
};

struct StepFlops {
  std::vector<LayerFlops> layers;  // the model's layers in forward order, then "loss"
  double forward = 0;              // one micro-batch, every layer and the loss
  double backward = 0;
  double optimizer = 0;            // once per step
  double forward_macs = 0;         // convolutions and fc, forward: the published figure
  // One optimizer step over `accumulate` micro-batches.
  double per_step(int64_t accumulate = 1) const {
    return static_cast<double>(accumulate) * (forward + backward) + optimizer;
  }
};

// Per-parameter FLOPs of one update by `opt` (the rule above);
// std::invalid_argument for an unknown optimizer.
double optimizer_flops_per_parameter(const OptimizerSettings& opt);

StepFlops count_step_flops(const std::vector<LayerShape>& layers, int64_t parameters,
                           const OptimizerSettings& opt);
inline StepFlops count_step_flops(const ResNet& model, const OptimizerSettings& opt) {
  return count_step_flops(model.layer_shapes(), model.parameter_count(), opt);
}

}  // namespace xrun
