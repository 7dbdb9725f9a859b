// tests/engine/step_flops_test.cpp: the FLOPs of a training step as the model
// counts them (engine/model/step_flops.h) against two independent counts:
// torchvision's published forward GFLOPS (MACs of the convolutions and fc at
// 224x224, 1000 classes: resnet18 1.81, resnet34 3.66, resnet50 4.09,
// resnet101 7.80, resnet152 11.51, two decimals) and PyTorch's own
// FlopCounterMode over a real training step, layer by layer, forward and
// backward (tests/engine/fixtures/torch_flop_counts.json, by
// make_flop_counts.py with PyTorch 2.15; the total is PyTorch's global
// count of the step). The shapes come from the model as
// built on the CPU backend (nothing allocated).
#include "catch2_compat.h"

#include <cmath>
#include <map>
#include <set>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/resnet.h"
#include "engine/model/step_bytes.h"
#include "engine/model/step_flops.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

struct Built {
  cpu::CpuBackend backend{1};
  std::unique_ptr<ResNet> model;
  Built(const std::string& arch, int64_t classes, int64_t batch, int64_t size) {
    ModelSpec spec;
    spec.arch = arch, spec.num_classes = classes, spec.batch = batch, spec.image_size = size;
    model = std::make_unique<ResNet>(backend, spec);
  }
};

OptimizerSettings adamw() { return OptimizerSettings{}; }

// FLOPs per layer and pass ("forward", "backward"): the two backward passes
// of a convolution or fc added, as PyTorch attributes them to one module.
std::map<std::string, std::map<std::string, double>> by_layer(const StepFlops& f) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const LayerFlops& l : f.layers)
    out[l.layer][l.pass == "forward" ? "forward" : "backward"] += l.flops;
  return out;
}

}  // namespace

TEST_CASE("forward MACs match torchvision's published GFLOPS for every resnet", "[flops]") {
  const std::map<std::string, double> published = {
      {"resnet18", 1.81}, {"resnet34", 3.66}, {"resnet50", 4.09},
      {"resnet101", 7.80}, {"resnet152", 11.51}};
  for (const auto& [arch, gmacs] : published) {
    INFO(arch);
    Built b(arch, 1000, 2, 224);
    const StepFlops f = count_step_flops(*b.model, adamw());
    const double per_image = f.forward_macs / 2 / 1e9;
    CHECK(std::abs(per_image - gmacs) <= 0.005 + 1e-9);  // published to two decimals
  }
}

TEST_CASE("convolution and fc FLOPs match PyTorch's FlopCounterMode layer by layer", "[flops]") {
  const auto fixture = testing::load_fixture("torch_flop_counts.json");
  for (const auto& c : fixture.at("cases")) {
    const std::string arch = c.at("arch");
    const int64_t classes = c.at("classes"), batch = c.at("batch"), size = c.at("image_size");
    INFO(arch << ", " << classes << " classes, batch " << batch << ", " << size << "x" << size);
    Built b(arch, classes, batch, size);
    const StepFlops f = count_step_flops(*b.model, adamw());
    const auto ours = by_layer(f);
    double total = 0;
    for (const auto& [layer, passes] : c.at("layers").items()) {
      INFO(layer);
      REQUIRE(ours.count(layer));
      double forward = ours.at(layer).at("forward"), backward = ours.at(layer).at("backward");
      if (layer == "fc") {  // PyTorch counts no bias add, and no bias gradient sum
        forward -= static_cast<double>(batch * classes);
        backward -= static_cast<double>(batch * classes);
      }
      CHECK(forward == passes.at("forward").get<double>());
      // PyTorch's module tracker books a downsample conv's backward together
      // with its block's main branch (the two branches' backward passes
      // overlap in autograd), so its per-module figure there is not one
      // layer's; its global total below covers those layers.
      if (layer.find("downsample") == std::string::npos)
        CHECK(backward == passes.at("backward").get<double>());
      total += forward + backward;
    }
    // Every convolution and fc of ours is one PyTorch counted, and together
    // they are its whole count (it counts nothing else in a resnet).
    std::set<std::string> counted;
    for (const auto& [layer, passes] : c.at("layers").items()) counted.insert(layer);
    for (const LayerShape& l : b.model->layer_shapes())
      if (l.kind == LayerShape::Kind::conv || l.kind == LayerShape::Kind::linear)
        CHECK(counted.count(l.name));
    CHECK(total == c.at("total").get<double>());
  }
}

TEST_CASE("the totals are the sums of the layers, and conv1 has no backward-data", "[flops]") {
  Built b("resnet50", 10, 8, 32);
  OptimizerSettings sgd;
  sgd.name = "sgd", sgd.momentum = 0.9, sgd.weight_decay = 0;
  const StepFlops f = count_step_flops(*b.model, sgd);
  double forward = 0, backward = 0;
  std::set<std::string> conv1_passes;
  for (const LayerFlops& l : f.layers) {
    CHECK(l.flops > 0);
    (l.pass == "forward" ? forward : backward) += l.flops;
    if (l.layer == "conv1") conv1_passes.insert(l.pass);
  }
  CHECK(forward == f.forward);
  CHECK(backward == f.backward);
  CHECK(conv1_passes == std::set<std::string>{"forward", "backward_weights"});
  CHECK(f.optimizer == 4.0 * static_cast<double>(b.model->parameter_count()));  // SGD + momentum
  CHECK(f.per_step(3) == 3 * (f.forward + f.backward) + f.optimizer);
  // The backward of a step does about twice the forward's work.
  CHECK(f.backward / f.forward == Approx(2.0).margin(0.05));
}

TEST_CASE("batch norm, pooling, residual, loss and optimizer follow the stated rules", "[flops]") {
  // resnet50 at 224x224: 11,113,984 batch-norm elements per image (the
  // outputs of its 53 convolutions; fvcore-style counters report 11.1M
  // activations), 16 blocks' residual sums.
  Built b("resnet50", 10, 2, 224);
  const StepFlops f = count_step_flops(*b.model, adamw());
  double bn_elements = 0, bn_forward = 0, bn_backward = 0;
  int residuals = 0;
  for (const LayerShape& l : b.model->layer_shapes()) {
    if (l.kind == LayerShape::Kind::residual) ++residuals;
    if (l.kind != LayerShape::Kind::batch_norm) continue;
    const double e = static_cast<double>(l.shape.n * l.shape.c * l.shape.h * l.shape.w);
    bn_elements += e;
    const int act = l.activation == BnActivation::none ? 0 : l.activation == BnActivation::relu ? 1 : 2;
    bn_forward += (8 + act) * e;
    bn_backward += (act == 0 ? 9 : 10) * e;
  }
  CHECK(bn_elements == 2.0 * 11113984);
  CHECK(residuals == 16);
  const auto layers = by_layer(f);
  double counted_bn_forward = 0, counted_bn_backward = 0;
  for (const LayerShape& l : b.model->layer_shapes())
    if (l.kind == LayerShape::Kind::batch_norm) {
      counted_bn_forward += layers.at(l.name).at("forward");
      counted_bn_backward += layers.at(l.name).at("backward");
    }
  CHECK(counted_bn_forward == bn_forward);
  CHECK(counted_bn_backward == bn_backward);
  // max pool 3x3/2 on 2 x 64 x 112x112 -> 56x56: 8 comparisons per output.
  CHECK(layers.at("maxpool").at("forward") == 8.0 * 2 * 64 * 56 * 56);
  CHECK(layers.at("maxpool").at("backward") == 2.0 * 64 * 56 * 56);
  CHECK(layers.at("avgpool").at("forward") == 2.0 * 2048 * 7 * 7 + 2 * 2048);
  CHECK(layers.at("layer1.0.residual").at("backward") == 2.0 * 64 * 56 * 56);
  CHECK(layers.at("loss").at("forward") == 4.0 * 2 * 10);
  CHECK(layers.at("loss").at("backward") == 3.0 * 2 * 10);
  CHECK(f.optimizer == 15.0 * 23528522);
  OptimizerSettings nesterov;
  nesterov.name = "sgd", nesterov.momentum = 0.9, nesterov.nesterov = true;
  CHECK(optimizer_flops_per_parameter(nesterov) == 8);
  nesterov.name = "lamb";
  CHECK_THROWS_AS(optimizer_flops_per_parameter(nesterov), std::invalid_argument);
}

TEST_CASE("least bytes: one per layer and pass the FLOPs count, by the stated rules", "[flops][bytes]") {
  Built b("resnet50", 10, 2, 224);
  const StepFlops f = count_step_flops(*b.model, adamw());
  const std::vector<LayerBytes> bytes = count_layer_bytes(b.model->layer_shapes(), 4);
  // The same (layer, pass) list, in the same order.
  REQUIRE(bytes.size() == f.layers.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    INFO(f.layers[i].layer << " " << f.layers[i].pass);
    CHECK(bytes[i].layer == f.layers[i].layer);
    CHECK(bytes[i].pass == f.layers[i].pass);
    CHECK(bytes[i].bytes > 0);
  }
  std::map<std::pair<std::string, std::string>, double> at;
  for (const LayerBytes& l : bytes) at[{l.layer, l.pass}] = l.bytes;
  // conv1: 2 x 3 x 224 x 224 in, 64 x 3 x 7 x 7 weights, 2 x 64 x 112 x 112 out.
  const double x = 2.0 * 3 * 224 * 224, w = 64.0 * 3 * 7 * 7, y = 2.0 * 64 * 112 * 112;
  CHECK(at.at({"conv1", "forward"}) == 4 * (x + w + y));
  CHECK(at.at({"conv1", "backward_weights"}) == 4 * (x + y + w));
  CHECK(at.count({"conv1", "backward_data"}) == 0);
  // bn1 (fused ReLU) on conv1's output; maxpool to 56x56.
  CHECK(at.at({"bn1", "forward"}) == 4 * (2 * y + 2 * 64));
  CHECK(at.at({"bn1", "backward"}) == 4 * (4 * y + 2 * 64));
  const double pooled = 2.0 * 64 * 56 * 56;
  CHECK(at.at({"maxpool", "forward"}) == 4 * (y + pooled));
  CHECK(at.at({"maxpool", "backward"}) == 4 * (2 * y + pooled));
  CHECK(at.at({"layer1.0.residual", "backward"}) == 4 * 3 * 2.0 * 64 * 56 * 56);  // the block input
  // fc: 2048 -> 10 with its bias, on 2 images.
  CHECK(at.at({"fc", "forward"}) == 4 * (2.0 * 2048 + 2048 * 10 + 10 + 2 * 10));
  CHECK(at.at({"loss", "backward"}) == 4 * 2 * 2.0 * 10);

  // Independently: the weights each forward pass reads are the model's
  // parameters. A pass's bytes are activations (per image) plus weights
  // (per batch): bytes(batch 1) x 2 - bytes(batch 2) leaves the weights.
  Built one("resnet50", 10, 1, 64), two("resnet50", 10, 2, 64);
  const auto b1 = count_layer_bytes(one.model->layer_shapes(), 4);
  const auto b2 = count_layer_bytes(two.model->layer_shapes(), 4);
  double weights = 0;
  for (size_t i = 0; i < b1.size(); ++i)
    if (b1[i].pass == "forward" && b1[i].layer != "loss") weights += 2 * b1[i].bytes - b2[i].bytes;
  CHECK(weights == 4.0 * static_cast<double>(one.model->parameter_count()));
  // bf16 / fp16: half the bytes.
  const auto half = count_layer_bytes(b.model->layer_shapes(), 2);
  for (size_t i = 0; i < half.size(); ++i) CHECK(2 * half[i].bytes == bytes[i].bytes);
}
