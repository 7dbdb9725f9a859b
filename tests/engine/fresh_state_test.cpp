// tests/engine/fresh_state_test.cpp: a training step's gradients are a
// function of the weights and the batch alone. The second step of a model
// that has already trained one step must give the same gradients, bit for
// bit, as a freshly built model given the same weights and batch: any state
// a kernel keeps from one step to the next (a scratchpad or accumulator not
// reset, a reorder cache gone stale) shows here. ISA-dependent (oneDNN picks
// other kernels and blockings per ISA): CTest runs it under AVX2 too.
#include "catch2_compat.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/resnet.h"

using namespace xrun;

namespace {

struct BuiltModel {
  explicit BuiltModel(int64_t size, int64_t batch) : be(0) {
    ModelSpec spec;
    spec.arch = "resnet18";
    spec.num_classes = 10;
    spec.batch = batch;
    spec.image_size = size;
    model = std::make_unique<ResNet>(be, spec);
    loss = be.softmax_cross_entropy(model->logits(), model->dlogits());
    OptimizerSettings os;
    os.name = "sgd";
    os.momentum = 0.9;
    opt = be.optimizer(os, false);
    be.allocate();
  }
  std::map<std::string, std::vector<float>> read_state(bool grads) {
    std::map<std::string, std::vector<float>> out;
    for (const StateEntry& e : model->state()) {
      const Tensor* t = grads ? e.grad : e.tensor;
      if (!t || e.kind == StateEntry::Kind::counter) continue;
      std::vector<float> v(static_cast<size_t>(t->numel()));
      be.read(t, v);
      out[e.name] = std::move(v);
    }
    return out;
  }
  void pass() {
    model->forward(true);
    loss->forward_backward(static_cast<int>(model->input()->dims[0]), 1.0f);
    model->backward();
  }
  cpu::CpuBackend be;
  std::unique_ptr<ResNet> model;
  std::unique_ptr<LossOp> loss;
  std::unique_ptr<OptimizerOp> opt;
};

}  // namespace

TEST_CASE("a second step's gradients equal a fresh model's on the same weights and batch",
          "[model][fresh]") {
  for (int64_t size : {32, 64}) {
    INFO("resnet18 at " << size << "x" << size << ", batch 4");
    BuiltModel trained(size, 4);
    trained.model->init_parameters(3);
    std::mt19937 g(11);
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(trained.model->input()->numel()));
    for (float& v : x) v = normal(g);
    const std::vector<int32_t> labels = {1, 7, 3, 3};
    trained.be.write(trained.model->input(), x);
    trained.be.write_labels(labels);
    trained.pass();
    trained.opt->step({0.05, 1, 1.0f, false});
    const auto weights = trained.read_state(false);
    trained.pass();  // step 2, same batch
    const auto second = trained.read_state(true);

    BuiltModel fresh(size, 4);
    for (const StateEntry& e : fresh.model->state())
      if (weights.count(e.name)) fresh.be.write(e.tensor, weights.at(e.name));
    fresh.be.write(fresh.model->input(), x);
    fresh.be.write_labels(labels);
    fresh.pass();
    const auto first = fresh.read_state(true);
    REQUIRE(first.size() == second.size());
    int differ = 0;
    std::string which;
    for (const auto& [name, v] : first)
      if (v != second.at(name) && !differ++) which = name;
    INFO(differ << " gradients differ, the first " << which);
    CHECK(differ == 0);
  }
}
