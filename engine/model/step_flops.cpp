// engine/model/step_flops.cpp: the rules of step_flops.h applied to each
// layer shape. Plain arithmetic in double (a ResNet152 step at batch 256 is
// about 1e14 FLOPs: exact in double's 53 bits).
#include "engine/model/step_flops.h"

#include <stdexcept>

namespace xrun {

double optimizer_flops_per_parameter(const OptimizerSettings& opt) {
  if (opt.name == "adamw") return 15;
  if (opt.name != "sgd") throw std::invalid_argument("unknown optimizer '" + opt.name + "'");
  double f = 2;  // w -= lr * g
  if (opt.weight_decay != 0) f += 2;
  if (opt.momentum != 0) f += 2;
  if (opt.momentum != 0 && opt.nesterov) f += 2;
  return f;
}

namespace {

double bn_forward_per_element(BnActivation act) {
  switch (act) {
    case BnActivation::none: return 8;
    case BnActivation::relu: return 9;
    case BnActivation::add_relu: return 10;
  }
  return 8;
}

double bn_backward_per_element(BnActivation act) {
  return act == BnActivation::none ? 9 : 10;
}

}  // namespace

StepFlops count_step_flops(const std::vector<LayerShape>& layers, int64_t parameters,
                           const OptimizerSettings& opt) {
  StepFlops out;
  auto add = [&](const std::string& layer, const char* pass, double flops) {
    out.layers.push_back({layer, pass, flops});
    (std::string(pass) == "forward" ? out.forward : out.backward) += flops;
  };
  double logits = 0;
  for (const LayerShape& l : layers) {
    const ConvShape& s = l.shape;
    const double n = static_cast<double>(s.n), c = static_cast<double>(s.c);
    const double in_elements = n * c * static_cast<double>(s.h) * static_cast<double>(s.w);
    const double out_pixels = static_cast<double>(s.out_h()) * static_cast<double>(s.out_w());
    switch (l.kind) {
      case LayerShape::Kind::conv: {
        const double macs = n * static_cast<double>(s.k) * out_pixels * c *
                            static_cast<double>(s.r) * static_cast<double>(s.s);
        out.forward_macs += macs;
        add(l.name, "forward", 2 * macs);
        if (l.input_grad) add(l.name, "backward_data", 2 * macs);
        add(l.name, "backward_weights", 2 * macs);
        break;
      }
      case LayerShape::Kind::linear: {
        const double macs = n * c * static_cast<double>(s.k);
        const double bias = n * static_cast<double>(s.k);
        out.forward_macs += macs;
        add(l.name, "forward", 2 * macs + bias);
        add(l.name, "backward_data", 2 * macs);
        add(l.name, "backward_weights", 2 * macs + bias);
        logits += bias;  // N * out
        break;
      }
      case LayerShape::Kind::batch_norm:
        add(l.name, "forward", bn_forward_per_element(l.activation) * in_elements);
        add(l.name, "backward", bn_backward_per_element(l.activation) * in_elements);
        break;
      case LayerShape::Kind::max_pool: {
        const double outputs = n * c * out_pixels;
        add(l.name, "forward", (static_cast<double>(s.r * s.s) - 1) * outputs);
        add(l.name, "backward", outputs);
        break;
      }
      case LayerShape::Kind::avg_pool:
        add(l.name, "forward", in_elements + n * c);
        add(l.name, "backward", in_elements);
        break;
      case LayerShape::Kind::residual:
        add(l.name, "backward", in_elements);
        break;
    }
  }
  add("loss", "forward", 4 * logits);
  add("loss", "backward", 3 * logits);
  out.optimizer = optimizer_flops_per_parameter(opt) * static_cast<double>(parameters);
  return out;
}

}  // namespace xrun
