// tests/cuda/cuda_shape_matrix_test.cpp: the CPU engine's shape matrix
// (tests/engine/shape_matrix_test.cpp) on the GPU, against the CPU: one
// forward and backward of each architecture at the size classes where the
// engines change layout or algorithm (2x2 and 1x1 maps, odd sides, blocked
// maps throughout), batch 1 and 4, in fp32, with the same weights, images
// and labels on both. The loss, the logits and the gradients of the first
// and last layers must agree; shapes that would put one value per channel
// into a batch norm must be refused on the GPU as on the CPU. A smaller
// matrix than the CPU's: the GPU check has a time limit.
#include "cuda_test_util.h"

#include "core/resnet_shapes.h"
#include "engine/model/resnet.h"
#include "engine/shape_case.h"

using namespace xrun;
using namespace xrun::cudatest;

namespace {

// One training forward and backward of `arch` at `size`, `batch` on `be`:
// loss, logits and the gradients of conv1 and fc, by name.
Outputs one_pass(Backend& be, const std::string& arch, int64_t size, int64_t batch) {
  ResNet model(be, testing::shape_spec(arch, size, batch));
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  be.allocate();
  testing::write_shape_batch(be, model, size, batch);
  model.forward(true);
  loss->forward_backward(static_cast<int>(batch), 1.0f);
  model.backward();
  const auto r = loss->read_results();
  Outputs out{{"loss", {static_cast<float>(r.loss_sum / r.rows)}},
              {"logits", read(be, model.logits())}};
  for (const StateEntry& e : model.state())
    if (e.name == "conv1.weight" || e.name == "fc.weight") out["grad " + e.name] = read(be, e.grad);
  return out;
}

void check_shape(const std::string& arch, int64_t size, int64_t batch) {
  const std::string what = arch + " " + std::to_string(size) + "x" + std::to_string(size) +
                           " batch " + std::to_string(batch);
  INFO(what);
  if (!resnet_training_shape_problem(batch, size).empty()) {
    auto g = gpu("fp32");
    ResNet model(*g, testing::shape_spec(arch, size, batch));
    g->allocate();
    CHECK_THROWS_WITH(model.forward(true), Catch::Contains("1 value per channel"));
    return;
  }
  // Whole networks in fp32: cuDNN and oneDNN sum in different orders, and
  // batch norm over a few values per channel amplifies that; 1e-5 is a
  // 0.3% relative RMS error, far below what a wrong layout or stride gives
  // (errors of order 1).
  compare_backends("shapes", "fp32", 1e-5, what,
                   [&](Backend& be) { return one_pass(be, arch, size, batch); });
}

}  // namespace

TEST_CASE("cuda shape matrix: resnet18 and resnet50 at every size class match the CPU",
          "[cuda][shapes]") {
  for (const char* arch : {"resnet18", "resnet50"})
    for (int64_t size : {8, 9, 16, 32, 64})
      for (int64_t batch : {1, 4}) check_shape(arch, size, batch);
}

TEST_CASE("cuda shape matrix: resnet34, 101 and 152 at 8x8 match the CPU", "[cuda][shapes]") {
  for (const char* arch : {"resnet34", "resnet101", "resnet152"}) check_shape(arch, 8, 4);
}
