// tests/engine/gradcheck_test.cpp: finite-difference gradient checks of the
// CPU backend's backward passes, end to end: (1) a small network wired from the
// backend's ops exactly as engine/model/resnet.cpp wires its blocks (a stem
// conv3x3-BN-ReLU, one bottleneck block with a strided downsample shortcut,
// one identity bottleneck block, global average pool, linear, softmax
// cross-entropy), checking sampled elements of EVERY parameter tensor and of
// the input; (2) the whole xrun::ResNet (resnet18), checking a few elements of
// the first conv, a conv inside an identity block, BN gammas/betas in the
// middle and at the end, a downsample BN, and the fc bias. Both catch a
// missing or doubled residual-gradient sum (checked by mutation).
//
// Method. In training mode BN uses batch statistics, so the mean loss is a
// deterministic function of parameters and input; the analytic gradient (one
// forward_backward + backward) is compared with the central difference
// n = (L(x+h) - L(x-h)) / (x+h - x-h), the steps taken as the fp32 values
// actually written. An element passes when
//     |analytic - n| <= atol + rtol * max(|analytic|, |n|).
// Choosing h and the tolerances (all measured on this build):
//  - rounding: the whole forward is fp32, so L jitters as x moves by tiny
//    steps: 3e-7 rms (up to 8e-7) in the small net, up to 9e-7 rms in resnet18
//    for the stem. That puts ~0.7 * jitter / h of noise into n: 2e-4 rms at
//    h = 1e-3 in the small net, hence atol = 1e-3 there (worst seen: 0.57 of
//    the bound); elements with smaller gradients are only checked to be small.
//  - truncation is negligible at these steps (BN divides by a batch std of
//    O(1); parameters and inputs are O(0.1..1)).
//  - kinks: ReLU and max pooling are not differentiable at 0 / at ties; a step
//    that carries a pre-activation across 0 biases n. The bias grows with h
//    and with the number of pre-activations the element feeds: the resnet18
//    stem weight feeds 32768 of them, so it uses h = 1e-4 (its gradients are
//    O(1), atol 3e-2), a layer1 conv h = 3e-4, deeper tensors h = 1e-3.
//    Each element is also differenced at h/2; when the two disagree beyond
//    the tolerance (x3 for the noisier half step) the element sits next to a
//    kink and is not judged, and at most 1 in 10 elements may be such.
//  - rtol 5e-2 covers the remaining kink bias; the fc bias (no kink after it)
//    uses rtol 1e-2, atol 1e-4.
// Batch size: resnet18 on 16x16 images runs layer3/layer4 at 1x1, so their BN
// normalises N values per channel; with N = 2 those are always +-1, the loss is
// piecewise constant in every earlier parameter and finite differences are
// meaningless (measured: analytic 1e3..1e5 vs noise). N = 8 is used.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/resnet.h"
#include "op_test_util.h"

namespace {

using xrun::BnActivation;
using xrun::ConvShape;
using xrun::Tensor;
using xrun::TensorRole;
using xrun::cpu::CpuBackend;
using namespace xrun::optest;

ConvShape conv_shape(const Tensor* x, int64_t k, int64_t ksize, int64_t stride, int64_t pad) {
  return {.n = x->dims[0], .c = x->dims[1], .h = x->dims[2], .w = x->dims[3], .k = k,
          .r = ksize, .s = ksize, .stride = stride, .pad = pad};
}

struct Param {
  std::string name;
  Tensor* value;
  Tensor* grad;
};

// A stem and two torchvision bottleneck blocks on the backend's ops, wired as
// engine/model/resnet.cpp wires them (see the comments there). `planes` must
// be >= 16: below that oneDNN keeps some convolution outputs in NHWC and
// others in nChw16c, and the block's residual add needs one layout (the
// backend refuses the mix).
class TinyBottleneckNet {
 public:
  struct Block {
    std::string name;
    bool downsample = false;
    std::unique_ptr<xrun::ConvOp> c1, c2, c3, ds_conv;
    std::unique_ptr<xrun::BatchNormOp> b1, b2, b3, ds_bn;
    Tensor* dx = nullptr;
    Tensor* second_dx = nullptr;
  };

  // Input [n, 3, hw, hw]; a stem (conv 3x3 to `c` channels, BN + ReLU, like
  // the model's conv1/bn1) makes the blocks' input a blocked activation as in
  // the model; then the two blocks of `planes` (output planes * 4).
  TinyBottleneckNet(int threads, int64_t n, int64_t c, int64_t hw, int64_t planes,
                    int64_t classes)
      : be(threads), n_(n) {
    input = be.input(n, 3, hw, hw);
    dinput = be.tensor_like(input, "dinput", TensorRole::activation_grad);
    stem_conv = be.conv("conv1", conv_shape(input, c, 3, 1, 1), input, dinput);
    stem_bn = be.batch_norm("bn1", stem_conv->y, stem_conv->dy, BnActivation::relu, nullptr,
                            nullptr);
    params.push_back({"conv1.weight", stem_conv->weight, stem_conv->weight_grad});
    params.push_back({"bn1.weight", stem_bn->gamma, stem_bn->gamma_grad});
    params.push_back({"bn1.bias", stem_bn->beta, stem_bn->beta_grad});
    Tensor* x = stem_bn->y;
    Tensor* dx = stem_bn->dy;
    for (int i = 0; i < 2; ++i) {
      Block& b = blocks[i];
      b.name = "layer1." + std::to_string(i);
      const int64_t stride = i == 0 ? 2 : 1;
      b.downsample = i == 0;
      b.dx = dx;
      b.second_dx = be.tensor_like(x, b.name + ".second_dx", TensorRole::activation_grad);
      Tensor* main_dx = b.downsample ? b.second_dx : dx;
      Tensor* residual = x;
      Tensor* d_residual = b.second_dx;
      if (b.downsample) {
        b.ds_conv = be.conv(b.name + ".downsample.0", conv_shape(x, planes * 4, 1, stride, 0), x,
                            dx);
        b.ds_bn = be.batch_norm(b.name + ".downsample.1", b.ds_conv->y, b.ds_conv->dy,
                                BnActivation::none, nullptr, nullptr);
        residual = b.ds_bn->y;
        d_residual = b.ds_bn->dy;
      }
      b.c1 = be.conv(b.name + ".conv1", conv_shape(x, planes, 1, 1, 0), x, main_dx);
      b.b1 = be.batch_norm(b.name + ".bn1", b.c1->y, b.c1->dy, BnActivation::relu, nullptr,
                           nullptr);
      b.c2 = be.conv(b.name + ".conv2", conv_shape(b.b1->y, planes, 3, stride, 1), b.b1->y,
                     b.b1->dy);
      b.b2 = be.batch_norm(b.name + ".bn2", b.c2->y, b.c2->dy, BnActivation::relu, nullptr,
                           nullptr);
      b.c3 = be.conv(b.name + ".conv3", conv_shape(b.b2->y, planes * 4, 1, 1, 0), b.b2->y,
                     b.b2->dy);
      b.b3 = be.batch_norm(b.name + ".bn3", b.c3->y, b.c3->dy, BnActivation::add_relu, residual,
                           d_residual);
      auto conv_param = [&](const std::string& nm, xrun::ConvOp& op) {
        params.push_back({nm + ".weight", op.weight, op.weight_grad});
      };
      auto bn_param = [&](const std::string& nm, xrun::BatchNormOp& op) {
        params.push_back({nm + ".weight", op.gamma, op.gamma_grad});
        params.push_back({nm + ".bias", op.beta, op.beta_grad});
      };
      conv_param(b.name + ".conv1", *b.c1);
      bn_param(b.name + ".bn1", *b.b1);
      conv_param(b.name + ".conv2", *b.c2);
      bn_param(b.name + ".bn2", *b.b2);
      conv_param(b.name + ".conv3", *b.c3);
      bn_param(b.name + ".bn3", *b.b3);
      if (b.downsample) {
        conv_param(b.name + ".downsample.0", *b.ds_conv);
        bn_param(b.name + ".downsample.1", *b.ds_bn);
      }
      x = b.b3->y;
      dx = b.b3->dy;
    }
    pool = be.global_avg_pool("avgpool", x, dx);
    fc = be.linear("fc", pool->y, pool->dy, classes);
    params.push_back({"fc.weight", fc->weight, fc->weight_grad});
    params.push_back({"fc.bias", fc->bias, fc->bias_grad});
    loss = be.softmax_cross_entropy(fc->y, fc->dy);
    be.allocate();
  }

  // Random parameters in the ranges torchvision's initialisation gives (and
  // BN affine parameters away from 1 / 0 so their gradients are generic).
  void init(Rng& rng) {
    for (const Param& p : params) {
      const auto& d = p.value->dims;
      std::vector<float> v;
      if (d.size() == 4) {  // conv: Kaiming uniform, fan_in
        const float bound = std::sqrt(6.0f / static_cast<float>(d[1] * d[2] * d[3]));
        v = rng.floats(p.value->numel(), -bound, bound);
      } else if (p.name.ends_with("bn1.weight") || p.name.ends_with("bn2.weight") ||
                 p.name.ends_with("bn3.weight") || p.name.ends_with("downsample.1.weight")) {
        v = rng.floats(p.value->numel(), 0.5f, 1.5f);
      } else if (p.name == "fc.weight") {
        v = rng.floats(p.value->numel(), -0.5f, 0.5f);
      } else {  // BN beta, fc bias
        v = rng.floats(p.value->numel(), -0.3f, 0.3f);
      }
      write(be, p.value, v);
    }
    write(be, input, rng.floats(input->numel(), -1, 1));
    std::vector<int32_t> labels(static_cast<size_t>(n_));
    for (auto& l : labels) l = static_cast<int32_t>(rng.below(fc->y->dims[1]));
    be.write_labels(labels);
  }

  void forward() {
    stem_conv->forward();
    stem_bn->forward_train();
    for (Block& b : blocks) {
      b.c1->forward();
      b.b1->forward_train();
      b.c2->forward();
      if (b.downsample) {
        b.ds_conv->forward();
        b.ds_bn->forward_train();
      }
      b.b2->forward_train();
      b.c3->forward();
      b.b3->forward_train();
    }
    pool->forward_train();
    fc->forward();
  }

  void backward() {
    fc->backward();
    pool->backward();
    for (int i = 1; i >= 0; --i) {
      Block& b = blocks[i];
      b.b3->backward();
      b.c3->backward_weights();
      b.c3->backward_data();
      b.b2->backward();
      b.c2->backward_weights();
      b.c2->backward_data();
      b.b1->backward();
      b.c1->backward_weights();
      b.c1->backward_data();
      if (b.downsample) {
        b.ds_bn->backward();
        b.ds_conv->backward_weights();
        b.ds_conv->backward_data();
      }
      be.pointwise().add_inplace(b.dx, b.second_dx);
    }
    stem_bn->backward();
    stem_conv->backward_weights();
    stem_conv->backward_data();
  }

  // Mean cross-entropy over the batch (the training objective).
  double loss_value() {
    forward();
    loss->forward(static_cast<int>(n_));
    const auto r = loss->read_results();
    return r.loss_sum / r.rows;
  }

  void train_step_gradients() {
    forward();
    loss->forward_backward(static_cast<int>(n_), 1.0f);
    backward();
  }

  CpuBackend be;
  Tensor* input = nullptr;
  Tensor* dinput = nullptr;
  std::unique_ptr<xrun::ConvOp> stem_conv;
  std::unique_ptr<xrun::BatchNormOp> stem_bn;
  Block blocks[2];
  std::unique_ptr<xrun::PoolOp> pool;
  std::unique_ptr<xrun::LinearOp> fc;
  std::unique_ptr<xrun::LossOp> loss;
  std::vector<Param> params;

 private:
  int64_t n_;
};

// Central difference of `loss` with respect to element i of tensor t, using
// the steps actually representable in fp32 around the value.
template <class LossFn>
double central_difference(xrun::Backend& be, Tensor* t, std::vector<float>& values, int64_t i,
                          double h, LossFn&& loss) {
  const float orig = values[i];
  const float up = static_cast<float>(orig + h), down = static_cast<float>(orig - h);
  values[i] = up;
  be.write(t, values);
  const double lp = loss();
  values[i] = down;
  be.write(t, values);
  const double lm = loss();
  values[i] = orig;
  be.write(t, values);
  return (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));
}

// The result of checking sampled elements of one tensor against central
// differences.
struct ElementCheck {
  std::string tensor;
  int64_t index = 0;
  double analytic = 0, numeric = 0, numeric_half = 0;
  bool smooth = true;  // D(h) and D(h/2) agree: no kink within the step
  bool pass = true;
};

struct GradTolerance {
  double h = 1e-3;     // central-difference step
  double atol = 1e-3;  // floor: ~5x the rounding noise of a difference (see top)
  double rtol = 5e-2;  // kink bias, fp32 accumulation in backward
};

// Checks `count` random elements of `value` (whose analytic gradient has been
// read into `grad`) plus its `largest` elements of largest analytic gradient
// against central differences of `loss`.
template <class LossFn>
void check_elements(xrun::Backend& be, const std::string& name, Tensor* value,
                    const std::vector<float>& grad, int64_t count, int64_t largest, Rng& rng,
                    const GradTolerance& tol, LossFn&& loss, std::vector<ElementCheck>& out) {
  std::vector<float> values = read(be, value);
  std::vector<int64_t> picks = rng.sample(value->numel(), count);
  std::vector<int64_t> order(grad.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(largest, order.size()),
                    order.end(), [&](int64_t a, int64_t b) {
                      return std::fabs(grad[a]) > std::fabs(grad[b]);
                    });
  for (int64_t k = 0; k < largest && k < static_cast<int64_t>(order.size()); ++k)
    if (std::find(picks.begin(), picks.end(), order[k]) == picks.end()) picks.push_back(order[k]);
  for (int64_t i : picks) {
    ElementCheck c;
    c.tensor = name;
    c.index = i;
    c.analytic = grad[i];
    c.numeric = central_difference(be, value, values, i, tol.h, loss);
    c.numeric_half = central_difference(be, value, values, i, tol.h / 2, loss);
    auto bound = [&](double a, double b, double atol) {
      return atol + tol.rtol * std::max(std::fabs(a), std::fabs(b));
    };
    c.pass = std::fabs(c.analytic - c.numeric) <= bound(c.analytic, c.numeric, tol.atol);
    // The half step has twice the rounding noise.
    c.smooth = std::fabs(c.numeric - c.numeric_half) <=
               bound(c.numeric, c.numeric_half, 3 * tol.atol);
    out.push_back(c);
  }
}

void report(const std::vector<ElementCheck>& checks) {
  if (!std::getenv("XRUN_TEST_ERRORS")) return;
  for (const ElementCheck& c : checks)
    std::printf("%-30s %5ld analytic % .5e numeric % .5e (h/2 % .5e) %s%s\n", c.tensor.c_str(),
                static_cast<long>(c.index), c.analytic, c.numeric, c.numeric_half,
                c.pass ? "ok" : "MISMATCH", c.smooth ? "" : " (kink)");
}

}  // namespace

// Every smooth element must pass; elements with a ReLU kink inside the
// finite-difference step are skipped, at most one in ten.
void judge(const std::vector<ElementCheck>& checks) {
  report(checks);
  int kinks = 0;
  for (const ElementCheck& c : checks) {
    if (!c.smooth) {
      ++kinks;
      continue;
    }
    INFO(c.tensor << "[" << c.index << "]: analytic " << c.analytic << ", numeric " << c.numeric
                  << " (h/2: " << c.numeric_half << ")");
    CHECK(c.pass);
  }
  INFO(kinks << " of " << checks.size() << " elements have a kink within the step");
  CHECK(kinks * 10 <= static_cast<int>(checks.size()));
}

TEST_CASE("gradcheck: two bottleneck blocks, every parameter and the input",
          "[gradcheck]") {
  TinyBottleneckNet net(1, 2, 16, 6, 16, 5);
  Rng rng(2024);
  net.init(rng);
  net.train_step_gradients();
  const GradTolerance tol;
  std::vector<ElementCheck> checks;
  auto loss = [&] { return net.loss_value(); };
  std::vector<Param> all = net.params;
  all.push_back({"input", net.input, net.dinput});
  for (const Param& p : all)
    check_elements(net.be, p.name, p.value, read(net.be, p.grad), p.name == "input" ? 12 : 6, 0,
                   rng, tol, loss, checks);
  judge(checks);
}

TEST_CASE("gradcheck: the whole resnet18 model on the CPU backend", "[gradcheck]") {
  // Batch 8: with 16x16 images layer3 and layer4 run at 1x1, so their BN sees
  // N values per channel; with N = 2 it normalises two values to +-1 and the
  // loss becomes piecewise constant in everything before them.
  const int64_t batch = 8, image = 16;
  CpuBackend be(1);
  xrun::ModelSpec spec;
  spec.arch = "resnet18";
  spec.batch = batch;
  spec.image_size = image;
  xrun::ResNet model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  be.allocate();
  model.init_parameters(7);
  Rng rng(5);
  std::vector<uint8_t> images(static_cast<size_t>(batch * 3 * image * image));
  for (auto& p : images) p = static_cast<uint8_t>(rng.below(256));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (auto& l : labels) l = static_cast<int32_t>(rng.below(spec.num_classes));
  const std::vector<float> mean = {0.4914f, 0.4822f, 0.4465f}, std = {0.2470f, 0.2435f, 0.2616f};
  be.load_batch(images.data(), labels.data(), static_cast<int>(batch), mean, std, nullptr);

  model.forward(true);
  loss->forward_backward(static_cast<int>(batch), 1.0f);
  model.backward();
  const double loss0 = loss->read_results().loss_sum / static_cast<double>(batch);
  REQUIRE(std::isfinite(loss0));
  auto loss_fn = [&] {
    model.forward(true);
    loss->forward(static_cast<int>(batch));
    const auto r = loss->read_results();
    return r.loss_sum / r.rows;
  };
  struct Target {
    const char* name;
    GradTolerance tol;
  };
  const std::vector<Target> targets = {
      {"conv1.weight", {.h = 1e-4, .atol = 3e-2, .rtol = 5e-2}},
      {"layer1.1.conv2.weight", {.h = 3e-4, .atol = 3e-3, .rtol = 5e-2}},
      {"layer2.0.bn1.weight", {.h = 1e-3, .atol = 2e-3, .rtol = 5e-2}},
      {"layer3.0.downsample.1.bias", {.h = 1e-3, .atol = 2e-3, .rtol = 5e-2}},
      {"layer4.1.bn2.weight", {.h = 1e-3, .atol = 1e-3, .rtol = 5e-2}},
      {"fc.bias", {.h = 1e-3, .atol = 1e-4, .rtol = 1e-2}},
  };
  std::vector<ElementCheck> checks;
  for (const Target& t : targets) {
    const xrun::StateEntry* entry = nullptr;
    for (const auto& e : model.state())
      if (e.name == t.name) entry = &e;
    REQUIRE(entry != nullptr);
    check_elements(be, t.name, entry->tensor, read(be, entry->grad), 2, 2, rng, t.tol, loss_fn,
                   checks);
  }
  judge(checks);
}
