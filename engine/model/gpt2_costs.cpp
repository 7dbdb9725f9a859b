// engine/model/gpt2_costs.cpp: see gpt2_costs.h.
#include "engine/model/gpt2_costs.h"

#include <string>

namespace xrun {

namespace {

// One pass's FLOPs and bytes, summed over the ops of a layer.
struct Cost {
  double flops = 0, bytes = 0;
};

struct Pair {
  Cost forward, backward;
};

}  // namespace

std::vector<LayerCostRecord> gpt2_layer_costs(const Gpt2Shape& s, int64_t batch, int64_t tokens,
                                              int element_bytes) {
  const double e = element_bytes, p = 4;  // activation and fp32 parameter bytes
  const double T = static_cast<double>(tokens), B = static_cast<double>(batch);
  const double R = B * T, C = static_cast<double>(s.width), V = static_cast<double>(s.vocab);
  const double H = static_cast<double>(s.heads), hs = C / H;

  // y[R, out] = x[R, in] W (+ b).
  const auto gemm = [&](Pair& l, double in, double out, bool bias) {
    const double mm = 2 * R * in * out, w = in * out * e, x = R * in * e, y = R * out * e;
    l.forward.flops += mm + (bias ? R * out : 0);
    l.forward.bytes += x + w + y + (bias ? out * p : 0);
    l.backward.flops += 2 * mm + (bias ? R * out : 0);
    l.backward.bytes += (y + w + x) + (x + y + w) + (bias ? out * p : 0);
  };
  const auto layer_norm = [&](Pair& l, bool add_to_dx) {
    const double x = R * C * e;
    l.forward.flops += 8 * R * C;
    l.forward.bytes += 2 * x + 2 * C * p;
    l.backward.flops += (add_to_dx ? 10 : 9) * R * C;
    l.backward.bytes += (add_to_dx ? 4 : 3) * x + 4 * C * p;  // x, dy, dx (read too when added to)
  };
  const auto elementwise = [&](Pair& l, double n, double fwd, double bwd, double fwd_tensors,
                               double bwd_tensors) {
    l.forward.flops += fwd * n;
    l.forward.bytes += fwd_tensors * n * e;
    l.backward.flops += bwd * n;
    l.backward.bytes += bwd_tensors * n * e;
  };

  std::vector<LayerCostRecord> out;
  const auto add = [&](const std::string& name, const Pair& l) {
    out.push_back({name, "forward", l.forward.flops, l.forward.bytes});
    out.push_back({name, "backward", l.backward.flops, l.backward.bytes});
  };

  Pair embedding;  // reads a wte row and a wpe row per token, writes y
  embedding.forward = {R * C, R * 4 + 2 * R * C * p + R * C * e};
  embedding.backward = {2 * R * C, R * 4 + R * C * e + 2 * R * C * p + T * C * p};
  add("transformer.wte", embedding);

  for (int64_t i = 0; i < s.layers; ++i) {
    Pair b;
    layer_norm(b, true);
    gemm(b, C, 3 * C, true);
    // Attention: qkv read, y written, probabilities [B, H, T, T] kept.
    const double scores = B * H * T * T, products = 2 * scores * hs;
    b.forward.flops += 2 * products + 5 * scores;
    b.forward.bytes += (3 * R * C + R * C + scores) * e;
    b.backward.flops += 4 * products + 4 * scores;
    b.backward.bytes += (3 * R * C + R * C + scores + 3 * R * C) * e;
    gemm(b, C, C, true);
    elementwise(b, R * C, 1, 0, 3, 3);  // residual: a + b; dy copied to both
    layer_norm(b, true);
    gemm(b, C, 4 * C, true);
    elementwise(b, R * 4 * C, 9, 14, 2, 3);  // GELU: x -> y; x, dy -> dx
    gemm(b, 4 * C, C, true);
    elementwise(b, R * C, 1, 0, 3, 3);
    add("transformer.h." + std::to_string(i), b);
  }

  Pair ln_f;
  layer_norm(ln_f, false);
  add("transformer.ln_f", ln_f);
  Pair head;
  gemm(head, C, V, false);
  add("lm_head", head);
  Pair loss;  // logits read, gradients written
  elementwise(loss, R * V, 4, 3, 1, 1);
  loss.backward.bytes += R * V * e;
  add("loss", loss);
  return out;
}

}  // namespace xrun
