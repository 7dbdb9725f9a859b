// engine/model/resnet.h: the one model definition of the ResNet family
// (torchvision's resnet18/34/50/101/152), written once against the Backend
// interface. Module and tensor names are torchvision's state_dict keys
// ("layer1.0.conv1.weight", "layer4.2.bn3.running_var", "fc.bias"), so
// checkpoints load into torchvision unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/model.h"

namespace xrun {

struct ModelSpec {
  std::string arch = "resnet50";
  int64_t num_classes = 10;
  int64_t batch = 32;
  int64_t channels = 3;
  int64_t image_size = 32;
};

// One layer as the model built it, for counting its work
// (engine/model/step_flops.h). Every kind in ConvShape's terms: n, c, h, w
// the input; conv: k, r, s, stride, pad as built; batch_norm, avg_pool,
// residual: k = c; max_pool: its window in r, s, stride, pad; linear: c the
// input features, k the output features, h = w = 1.
struct LayerShape {
  enum class Kind { conv, batch_norm, max_pool, avg_pool, linear, residual };
  Kind kind = Kind::conv;
  std::string name;  // as profile.layers names it ("layer1.0.conv1", "layer1.0.residual")
  ConvShape shape;
  bool input_grad = true;  // conv: backward-data runs (not for conv1: the image needs none)
  BnActivation activation = BnActivation::none;  // batch_norm
};

class ResNet final : public Model {
 public:
  // Builds every op on `backend` (declares all tensors); call
  // backend.allocate() afterwards, then init_parameters or load weights.
  ResNet(Backend& backend, const ModelSpec& spec);
  ~ResNet();
  ResNet(const ResNet&) = delete;
  ResNet& operator=(const ResNet&) = delete;

  // backward()'s `ready` gets a layer's parameters once complete (a conv's
  // after its backward-data, a BN's after its backward).
  void forward(bool training) override;  // input() -> logits()
  void backward(const ParamsReady& ready = {}) override;  // dlogits() -> every gradient

  Tensor* input() const { return input_; }
  Tensor* logits() const override;
  Tensor* dlogits() const override;
  const ModelSpec& spec() const { return spec_; }

  const std::vector<StateEntry>& state() const override { return state_; }

  // torchvision's initialisation: Kaiming normal (fan_out, relu) for convs,
  // BN weight 1 / bias 0 / running mean 0 / var 1, nn.Linear's default for fc.
  void init_parameters(uint64_t seed) override;
  std::string describe() const override {
    return spec_.arch + " with " + std::to_string(spec_.num_classes) + " classes";
  }

  // Every layer as built, in the order of the forward pass (the residual
  // gradient sums, one per block, after the block's layers).
  const std::vector<LayerShape>& layer_shapes() const { return layer_shapes_; }

  struct Block;  // a bottleneck or basic block
 private:
  struct Conv;
  struct BN;
  void add_conv(Conv& c, const std::string& name, const ConvShape& shape, Tensor* x, Tensor* dx);
  void add_bn(BN& b, const std::string& name, Tensor* x, Tensor* dx, BnActivation act,
              Tensor* residual = nullptr, Tensor* d_residual = nullptr);
  void add_state(const std::string& prefix, BatchNormOp& op);

  Backend& backend_;
  ModelSpec spec_;
  std::string training_problem_;  // why forward(true) cannot run, "" when it can
  Tensor* input_ = nullptr;
  std::unique_ptr<Conv> conv1_;
  std::unique_ptr<BN> bn1_;
  std::unique_ptr<PoolOp> maxpool_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<PoolOp> avgpool_;
  std::unique_ptr<LinearOp> fc_;
  std::vector<StateEntry> state_;
  std::vector<LayerShape> layer_shapes_;
};

// Block layout per arch: {bottleneck?, blocks per stage}. Throws for an
// unknown arch name.
struct ResNetLayout {
  bool bottleneck;
  int stages[4];
};
ResNetLayout resnet_layout(const std::string& arch);

}  // namespace xrun
