// tests/engine/torch_parity_test.cpp: xrun's CPU engine against PyTorch 1.13 +
// torchvision on the same weights and batch: three training steps (SGD with
// momentum and weight decay) of resnet18 and resnet50 at 64x64, judged
// against PyTorch float64 with PyTorch fp32's own error as the yardstick.
// The rule, the fixture and what is checked: tests/engine/torch_parity.h
// (shared with the CUDA engine's test, tests/cuda/cuda_parity_test.cpp).
#include <catch2/catch.hpp>

#include "engine/cpu/cpu_backend.h"
#include "torch_parity.h"

using namespace xrun;
namespace parity = xrun::testing::parity;

TEST_CASE("CPU engine matches PyTorch on resnet18 over three SGD steps", "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  cpu::CpuBackend be(0);
  parity::run_parity(be, f.at("runs").at(0));
}

TEST_CASE("CPU engine matches PyTorch on resnet50 over three SGD steps", "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  cpu::CpuBackend be(0);
  parity::run_parity(be, f.at("runs").at(1));
}
