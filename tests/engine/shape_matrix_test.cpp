// tests/engine/shape_matrix_test.cpp: every architecture trains at every
// size class. One training step (forward, loss, backward, SGD step) of
// resnet18, 34 and 50 at image sizes 8, 9, 12, 16, 28, 32 and 64 (resnet101
// and 152, whose blocks are resnet50's, at 8 and 32), batch 1 and 4, on the
// CPU engine: a shape matrix. The
// sizes cross every layout switch the CPU engine makes (convolutions with at
// most 4 output pixels run as GEMMs and hand over NHWC; 1x1 maps; maps
// that a max pool leaves blocked), which is where resnet18/34 at 8x8 once
// failed ("layer1.0.bn2: residual missing or of another layout"). Where
// layer4's batch norms would see one value per channel (batch 1 on 1x1
// maps), training must be refused by name instead of running on
// zero-variance statistics. resnet50 at 224x224, batch 1, is the one large
// case.
#include "catch2_compat.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/resnet_shapes.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/resnet.h"
#include "shape_case.h"

using namespace xrun;

namespace {

std::vector<float> read(Backend& be, const Tensor* t) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  be.read(t, v);
  return v;
}

// One SGD step of `arch` on `batch` random images of `size`: the loss is
// finite, every gradient finite and some non-zero, and the weights move.
void one_step(const std::string& arch, int64_t size, int64_t batch) {
  INFO(arch << " at " << size << "x" << size << ", batch " << batch);
  cpu::CpuBackend be(0);
  ResNet model(be, testing::shape_spec(arch, size, batch));
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings os;
  os.name = "sgd";
  os.momentum = 0.9;
  auto opt = be.optimizer(os, false);
  be.allocate();
  testing::write_shape_batch(be, model, size, batch);

  const std::string problem = resnet_training_shape_problem(batch, size);
  if (!problem.empty()) {
    CHECK_THROWS_WITH(model.forward(true), Catch::Contains("1 value per channel"));
    return;
  }
  const std::vector<float> fc_before = read(be, model.state().back().tensor);
  model.forward(true);
  loss->forward_backward(static_cast<int>(batch), 1.0f);
  model.backward();
  const auto r = loss->read_results();
  CHECK(std::isfinite(r.loss_sum));
  CHECK(r.rows == batch);
  double grad_l1 = 0;
  bool finite = true;
  for (const StateEntry& e : model.state()) {
    if (e.kind != StateEntry::Kind::parameter) continue;
    for (float v : read(be, e.grad)) {
      finite = finite && std::isfinite(v);
      grad_l1 += std::fabs(v);
    }
  }
  CHECK(finite);
  CHECK(grad_l1 > 0);
  opt->step({0.1, 1, 1.0f, false});
  CHECK(read(be, model.state().back().tensor) != fc_before);  // fc.bias moved
  // Evaluation runs at every shape, batch 1 too. (Its values are not
  // judged: one step leaves the running statistics near their initial 0
  // and 1, which do not normalise a fresh deep network's activations.)
  CHECK_NOTHROW(model.forward(false));
}

constexpr int64_t kEverySize[] = {8, 9, 12, 16, 28, 32, 64};
// resnet101 and 152 repeat resnet50's bottleneck blocks (more of them in
// layer3): their shapes are resnet50's, so two sizes (the GEMM-path 2x2
// maps, and blocked maps throughout) cover them at a fraction of the cost.
constexpr int64_t kDeepSizes[] = {8, 32};

template <class Sizes>
void matrix(const std::string& arch, const Sizes& sizes) {
  for (int64_t size : sizes)
    for (int64_t batch : {1, 4}) one_step(arch, size, batch);
}

}  // namespace

TEST_CASE("resnet18 trains one step at every size class, batch 1 and 4", "[model][shapes]") {
  matrix("resnet18", kEverySize);
}
TEST_CASE("resnet34 trains one step at every size class, batch 1 and 4", "[model][shapes]") {
  matrix("resnet34", kEverySize);
}
TEST_CASE("resnet50 trains one step at every size class, batch 1 and 4", "[model][shapes]") {
  matrix("resnet50", kEverySize);
}
TEST_CASE("resnet101 trains one step at 8x8 and 32x32, batch 1 and 4", "[model][shapes]") {
  matrix("resnet101", kDeepSizes);
}
TEST_CASE("resnet152 trains one step at 8x8 and 32x32, batch 1 and 4", "[model][shapes]") {
  matrix("resnet152", kDeepSizes);
}
TEST_CASE("resnet50 trains one step at 224x224, batch 1", "[model][shapes]") {
  one_step("resnet50", 224, 1);
}
