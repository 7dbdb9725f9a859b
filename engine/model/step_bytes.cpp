// engine/model/step_bytes.cpp: the rules of step_bytes.h applied to each
// layer shape, in elements, then times the element size.
#include "engine/model/step_bytes.h"

namespace xrun {

std::vector<LayerBytes> count_layer_bytes(const std::vector<LayerShape>& layers,
                                          int element_bytes) {
  std::vector<LayerBytes> out;
  const double e = static_cast<double>(element_bytes);
  auto add = [&](const std::string& layer, const char* pass, double elements) {
    out.push_back({layer, pass, elements * e});
  };
  double logits = 0;
  for (const LayerShape& l : layers) {
    const ConvShape& s = l.shape;
    const double n = static_cast<double>(s.n), c = static_cast<double>(s.c);
    const double k = static_cast<double>(s.k);
    const double x = n * c * static_cast<double>(s.h) * static_cast<double>(s.w);
    const double pixels = static_cast<double>(s.out_h()) * static_cast<double>(s.out_w());
    switch (l.kind) {
      case LayerShape::Kind::conv: {
        const double w = k * c * static_cast<double>(s.r) * static_cast<double>(s.s);
        const double y = n * k * pixels;
        add(l.name, "forward", x + w + y);
        if (l.input_grad) add(l.name, "backward_data", y + w + x);
        add(l.name, "backward_weights", x + y + w);
        break;
      }
      case LayerShape::Kind::linear: {
        const double w = c * k + k, y = n * k;
        add(l.name, "forward", x + w + y);
        add(l.name, "backward_data", y + w + x);
        add(l.name, "backward_weights", x + y + w);
        logits += y;
        break;
      }
      case LayerShape::Kind::batch_norm: {
        const double residual = l.activation == BnActivation::add_relu ? x : 0;
        const double mask = l.activation == BnActivation::none ? 0 : x;
        add(l.name, "forward", x + x + residual + 2 * c);
        add(l.name, "backward", x + x + x + mask + 2 * c);
        break;
      }
      case LayerShape::Kind::max_pool: {
        const double y = n * c * pixels;
        add(l.name, "forward", x + y);
        add(l.name, "backward", x + y + x);
        break;
      }
      case LayerShape::Kind::avg_pool:
        add(l.name, "forward", x + n * c);
        add(l.name, "backward", n * c + x);
        break;
      case LayerShape::Kind::residual:
        add(l.name, "backward", 3 * x);
        break;
    }
  }
  add("loss", "forward", 2 * logits);
  add("loss", "backward", 2 * logits);
  return out;
}

}  // namespace xrun
