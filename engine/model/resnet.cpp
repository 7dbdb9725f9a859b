// engine/model/resnet.cpp: torchvision's ResNet family on the Backend
// interface. Forward and backward are written out block by block (as
// torchvision's Bottleneck/BasicBlock read), so the data flow is visible:
//
//   conv1 -> bn1+relu -> maxpool -> layer1..layer4 (blocks) -> avgpool -> fc
//   bottleneck: conv1 1x1 -> bn1+relu -> conv2 3x3/stride -> bn2+relu
//               -> conv3 1x1 -> bn3 + shortcut -> relu
//   shortcut:   identity, or downsample = conv 1x1/stride -> bn
//
// Residual gradients: the block input's gradient is the sum of the main
// branch's and the shortcut's; one of them writes it, the other writes a
// second buffer that is added in.
#include "engine/model/resnet.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "core/resnet_shapes.h"
#include "engine/model/init_rng.h"

namespace xrun {

struct ResNet::Conv {
  std::string name;
  std::unique_ptr<ConvOp> op;
};
struct ResNet::BN {
  std::string name;
  std::unique_ptr<BatchNormOp> op;
};

struct ResNet::Block {
  std::string name;
  bool bottleneck = true;
  Conv c1, c2, c3;
  BN b1, b2, b3;
  bool downsample = false;
  Conv ds_conv;
  BN ds_bn;
  Tensor* dx = nullptr;          // gradient of the block input
  Tensor* second_dx = nullptr;   // the other branch's contribution, added into dx
  BN& last_bn() { return bottleneck ? b3 : b2; }
};

ResNetLayout resnet_layout(const std::string& arch) {
  if (arch == "resnet18") return {false, {2, 2, 2, 2}};
  if (arch == "resnet34") return {false, {3, 4, 6, 3}};
  if (arch == "resnet50") return {true, {3, 4, 6, 3}};
  if (arch == "resnet101") return {true, {3, 4, 23, 3}};
  if (arch == "resnet152") return {true, {3, 8, 36, 3}};
  throw std::invalid_argument("unknown model arch '" + arch +
                              "' (resnet18, resnet34, resnet50, resnet101, resnet152)");
}

static ConvShape conv_shape(const Tensor* x, int64_t k, int64_t ksize, int64_t stride,
                            int64_t pad) {
  ConvShape s;
  s.n = x->dims[0], s.c = x->dims[1], s.h = x->dims[2], s.w = x->dims[3];
  s.k = k, s.r = ksize, s.s = ksize, s.stride = stride, s.pad = pad;
  return s;
}

// ------------------------------------------------------------------ build --

void ResNet::add_conv(Conv& c, const std::string& name, const ConvShape& shape, Tensor* x,
                      Tensor* dx) {
  c.name = name;
  c.op = backend_.conv(name, shape, x, dx);
  layer_shapes_.push_back({LayerShape::Kind::conv, name, shape, dx != nullptr});
  state_.push_back({name + ".weight", StateEntry::Kind::parameter, c.op->weight,
                    c.op->weight_grad, {shape.k, shape.c, shape.r, shape.s}});
}

void ResNet::add_bn(BN& b, const std::string& name, Tensor* x, Tensor* dx, BnActivation act,
                    Tensor* residual, Tensor* d_residual) {
  b.name = name;
  b.op = backend_.batch_norm(name, x, dx, act, residual, d_residual);
  layer_shapes_.push_back({LayerShape::Kind::batch_norm, name, conv_shape(x, x->dims[1], 1, 1, 0),
                           true, act});
  add_state(name, *b.op);
}

void ResNet::add_state(const std::string& prefix, BatchNormOp& op) {
  const std::vector<int64_t> c = {op.gamma->dims[0]};
  state_.push_back({prefix + ".weight", StateEntry::Kind::parameter, op.gamma, op.gamma_grad, c});
  state_.push_back({prefix + ".bias", StateEntry::Kind::parameter, op.beta, op.beta_grad, c});
  state_.push_back({prefix + ".running_mean", StateEntry::Kind::running_stat, op.running_mean,
                    nullptr, c});
  state_.push_back({prefix + ".running_var", StateEntry::Kind::running_stat, op.running_var,
                    nullptr, c});
  state_.push_back({prefix + ".num_batches_tracked", StateEntry::Kind::counter, nullptr, nullptr,
                    {}});
}

ResNet::ResNet(Backend& backend, const ModelSpec& spec) : backend_(backend), spec_(spec) {
  const ResNetLayout layout = resnet_layout(spec.arch);
  if (spec.num_classes < 1) throw std::invalid_argument("num_classes must be >= 1");
  training_problem_ = resnet_training_shape_problem(spec.batch, spec.image_size);
  const int expansion = layout.bottleneck ? 4 : 1;

  input_ = backend_.input(spec.batch, spec.channels, spec.image_size, spec.image_size);

  // Stem. The input needs no gradient.
  conv1_ = std::make_unique<Conv>();
  bn1_ = std::make_unique<BN>();
  add_conv(*conv1_, "conv1", conv_shape(input_, 64, 7, 2, 3), input_, nullptr);
  add_bn(*bn1_, "bn1", conv1_->op->y, conv1_->op->dy, BnActivation::relu);
  maxpool_ = backend_.max_pool("maxpool", bn1_->op->y, bn1_->op->dy, 3, 2, 1);
  layer_shapes_.push_back({LayerShape::Kind::max_pool, "maxpool", conv_shape(bn1_->op->y, 64, 3, 2, 1)});

  Tensor* x = maxpool_->y;
  Tensor* dx = maxpool_->dy;
  int64_t inplanes = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage;
    for (int i = 0; i < layout.stages[stage]; ++i) {
      auto block = std::make_unique<Block>();
      Block& b = *block;
      b.name = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      b.bottleneck = layout.bottleneck;
      b.dx = dx;
      const int64_t stride = (i == 0 && stage > 0) ? 2 : 1;
      b.downsample = (i == 0) && (stride != 1 || inplanes != planes * expansion);

      // With a downsample the shortcut conv writes dx and the main branch
      // writes second_dx; with an identity shortcut it is the other way round.
      b.second_dx = backend_.tensor_like(x, b.name + ".second_dx", TensorRole::activation_grad);
      Tensor* main_dx = b.downsample ? b.second_dx : dx;

      Tensor* residual = x;
      Tensor* d_residual = b.second_dx;
      const size_t ds_state_begin = state_.size();
      if (b.downsample) {
        add_conv(b.ds_conv, b.name + ".downsample.0",
                 conv_shape(x, planes * expansion, 1, stride, 0), x, dx);
        add_bn(b.ds_bn, b.name + ".downsample.1", b.ds_conv.op->y, b.ds_conv.op->dy,
               BnActivation::none);
        residual = b.ds_bn.op->y;
        d_residual = b.ds_bn.op->dy;
      }
      // Main branch. The downsample's state entries move after the branch's,
      // as in torchvision's module order.
      std::vector<StateEntry> ds_state(state_.begin() + ds_state_begin, state_.end());
      state_.resize(ds_state_begin);

      if (b.bottleneck) {
        add_conv(b.c1, b.name + ".conv1", conv_shape(x, planes, 1, 1, 0), x, main_dx);
        add_bn(b.b1, b.name + ".bn1", b.c1.op->y, b.c1.op->dy, BnActivation::relu);
        add_conv(b.c2, b.name + ".conv2", conv_shape(b.b1.op->y, planes, 3, stride, 1),
                 b.b1.op->y, b.b1.op->dy);
        add_bn(b.b2, b.name + ".bn2", b.c2.op->y, b.c2.op->dy, BnActivation::relu);
        add_conv(b.c3, b.name + ".conv3", conv_shape(b.b2.op->y, planes * 4, 1, 1, 0),
                 b.b2.op->y, b.b2.op->dy);
        add_bn(b.b3, b.name + ".bn3", b.c3.op->y, b.c3.op->dy, BnActivation::add_relu, residual,
               d_residual);
      } else {
        add_conv(b.c1, b.name + ".conv1", conv_shape(x, planes, 3, stride, 1), x, main_dx);
        add_bn(b.b1, b.name + ".bn1", b.c1.op->y, b.c1.op->dy, BnActivation::relu);
        add_conv(b.c2, b.name + ".conv2", conv_shape(b.b1.op->y, planes, 3, 1, 1), b.b1.op->y,
                 b.b1.op->dy);
        add_bn(b.b2, b.name + ".bn2", b.c2.op->y, b.c2.op->dy, BnActivation::add_relu, residual,
               d_residual);
      }
      state_.insert(state_.end(), ds_state.begin(), ds_state.end());

      layer_shapes_.push_back({LayerShape::Kind::residual, b.name + ".residual",
                               conv_shape(x, x->dims[1], 1, 1, 0)});
      x = b.last_bn().op->y;
      dx = b.last_bn().op->dy;
      inplanes = planes * expansion;
      blocks_.push_back(std::move(block));
    }
  }
  avgpool_ = backend_.global_avg_pool("avgpool", x, dx);
  layer_shapes_.push_back({LayerShape::Kind::avg_pool, "avgpool", conv_shape(x, x->dims[1], 1, 1, 0)});
  fc_ = backend_.linear("fc", avgpool_->y, avgpool_->dy, spec.num_classes);
  {
    ConvShape fc;
    fc.n = spec.batch, fc.c = inplanes, fc.k = spec.num_classes;
    layer_shapes_.push_back({LayerShape::Kind::linear, "fc", fc});
  }
  state_.push_back({"fc.weight", StateEntry::Kind::parameter, fc_->weight, fc_->weight_grad,
                    {spec.num_classes, inplanes}});
  state_.push_back({"fc.bias", StateEntry::Kind::parameter, fc_->bias, fc_->bias_grad,
                    {spec.num_classes}});
}

ResNet::~ResNet() = default;

Tensor* ResNet::logits() const { return fc_->y; }
Tensor* ResNet::dlogits() const { return fc_->dy; }


// ----------------------------------------------------------- initialise --


void ResNet::init_parameters(uint64_t seed) {
  InitRng rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<float> values;
  const int64_t fc_in = fc_->weight->dims[1];
  for (const auto& e : state_) {
    if (e.kind == StateEntry::Kind::counter) continue;
    values.assign(e.tensor->numel(), 0.0f);
    const std::string& n = e.name;
    auto ends_with = [&](const char* s) {
      const size_t len = std::char_traits<char>::length(s);
      return n.size() >= len && n.compare(n.size() - len, len, s) == 0;
    };
    if (n == "fc.weight" || n == "fc.bias") {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fc_in));
      for (auto& v : values) v = static_cast<float>((2 * rng.uniform() - 1) * bound);
    } else if (e.dims.size() == 4) {  // conv weight: kaiming_normal_, fan_out, relu
      const double fan_out = static_cast<double>(e.dims[0] * e.dims[2] * e.dims[3]);
      const double std = std::sqrt(2.0 / fan_out);
      for (auto& v : values) v = static_cast<float>(rng.normal() * std);
    } else if (ends_with(".weight") || ends_with(".running_var")) {
      std::fill(values.begin(), values.end(), 1.0f);
    }  // BN bias and running_mean stay 0
    backend_.write(e.tensor, values);
  }
  num_batches_tracked = 0;
}

// ---------------------------------------------------------- forward/back --


void ResNet::forward(bool training) {
  if (training && !training_problem_.empty()) throw std::invalid_argument(training_problem_);
  auto bn_forward = [&](BN& b) {
    LayerHookScope s(hooks_, b.name);
    training ? b.op->forward_train() : b.op->forward_infer();
  };
  auto conv_forward = [&](Conv& c) {
    LayerHookScope s(hooks_, c.name);
    c.op->forward();
  };

  conv_forward(*conv1_);
  bn_forward(*bn1_);
  {
    LayerHookScope s(hooks_, "maxpool");
    training ? maxpool_->forward_train() : maxpool_->forward_infer();
  }
  for (auto& bp : blocks_) {
    Block& b = *bp;
    conv_forward(b.c1);
    bn_forward(b.b1);
    conv_forward(b.c2);
    if (b.downsample) {
      conv_forward(b.ds_conv);
      bn_forward(b.ds_bn);
    }
    if (b.bottleneck) {
      bn_forward(b.b2);
      conv_forward(b.c3);
      bn_forward(b.b3);
    } else {
      bn_forward(b.b2);
    }
  }
  {
    LayerHookScope s(hooks_, "avgpool");
    training ? avgpool_->forward_train() : avgpool_->forward_infer();
  }
  {
    LayerHookScope s(hooks_, "fc");
    fc_->forward();
  }
  if (training) ++num_batches_tracked;
}

void ResNet::backward(const ParamsReady& ready) {
  auto done = [&](const std::string& layer, std::initializer_list<Tensor*> params) {
    if (!ready) return;
    LayerHookScope s(hooks_, layer + ".update");
    ready(std::span<Tensor* const>(params.begin(), params.size()));
  };
  auto bn_backward = [&](BN& b) {
    {
      LayerHookScope s(hooks_, b.name);
      b.op->backward();
    }
    done(b.name, {b.op->gamma, b.op->beta});
  };
  auto conv_backward = [&](Conv& c) {
    {
      LayerHookScope s(hooks_, c.name);
      c.op->backward_weights();
      c.op->backward_data();
    }
    done(c.name, {c.op->weight});
  };

  {
    LayerHookScope s(hooks_, "fc");
    fc_->backward();
  }
  done("fc", {fc_->weight, fc_->bias});
  {
    LayerHookScope s(hooks_, "avgpool");
    avgpool_->backward();
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Block& b = **it;
    if (b.bottleneck) {
      bn_backward(b.b3);
      conv_backward(b.c3);
    }
    bn_backward(b.b2);
    conv_backward(b.c2);
    bn_backward(b.b1);
    conv_backward(b.c1);
    if (b.downsample) {
      bn_backward(b.ds_bn);
      conv_backward(b.ds_conv);
    }
    LayerHookScope s(hooks_, b.name + ".residual");
    backend_.pointwise().add_inplace(b.dx, b.second_dx);
  }
  {
    LayerHookScope s(hooks_, "maxpool");
    maxpool_->backward();
  }
  bn_backward(*bn1_);
  conv_backward(*conv1_);
}

}  // namespace xrun
