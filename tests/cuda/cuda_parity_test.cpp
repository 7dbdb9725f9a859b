// tests/cuda/cuda_parity_test.cpp: whole training steps of the CUDA engine,
// judged by the error budget PyTorch's own fp32 measures on the same runs.
// The runs are the fixture's (tests/engine/fixtures/torch_parity.json, see
// tests/engine/torch_parity.h): resnet18 (batch 4) and resnet50 (batch 8) at
// 64x64, three SGD steps (momentum, weight decay) from the same weights and
// batch: losses and logits of every step, every gradient and updated weight
// of step 1, BN running statistics after every step, eval logits at the end.
//
// fp32 (no TF32 anywhere: cuDNN FMA math, cuBLAS 32F) is judged exactly as
// the CPU engine is (tests/engine/torch_parity_test.cpp): against PyTorch
// float64, each tensor's distance within kFactor (4) times PyTorch fp32's own
// error on it plus a floor, every element of the tensors stored in full
// (torch_parity.h). A fixed NMSE threshold cannot do this: PyTorch's fp32
// errors range from 1e-8 to 1e-3 of the tensor's norm across the runs.
//
// tf32, fp16 and bf16 have no PyTorch reference in the fixture: each tensor
// is compared with the CPU engine's fp32 result on the same run by NMSE,
// with a threshold from the fixture's emulated runs at that precision
// (make_torch_fixtures.py, EMULATED): float64 runs of the same trajectory
// with every op's output and incoming gradient multiplied by (1 + u_p xi),
// xi uniform in [-1, 1], u_p = 2^-11 for tf32 (10-bit mantissas in the
// convolution and GEMM inputs) and fp16 (activations and the weight copies
// the convolutions read are stored in it), 2^-8 for bf16; two runs each,
// err_p = the larger distance from float64. Such a run rounds where the GPU
// stores and hits the ReLU kinks that rounding at u_p hits, which the
// earlier linear model (PyTorch fp32's error scaled by u_p / u32) could not
// know: one kink in fp32 made it expect 100% errors in fp16 everywhere
// upstream. The CPU engine's own error is negligible next to err_p, so
//     NMSE threshold = (kFactor * max(err_p / ‖r‖, u_p) + kFloor)^2
// with the parity rule's kFactor (room for the emulation's one rounding per
// op where the GPU also rounds the weight copies) and kFloor; max(., u_p)
// because every value passes at least one rounding at u_p. A threshold above
// kNmseCap = 0.25 (50% relative L2 error) says the emulation expects errors
// as large as the values themselves (an all-zero result scores 1, an
// unrelated one of the same norm 2): such a tensor cannot be judged, so it
// is only required finite and counted as "beyond the cap". From the
// fixture: resnet18 judges 203 of 251 tensors in tf32 and fp16 (of its
// step-1 gradients only 14 of 62: rounding at 2^-11 moves them by 16% at
// the median, through kinks) and 189 in bf16; resnet50 622 of 647 in tf32
// and fp16, 491 in bf16 (the linear model judged 210 and 138, 324 and 273).
// The rest are printed, not judged (XRUN_TEST_ERRORS=1),
// and the first GPU run calibrates the model: its table says how far below
// its threshold each run's worst tensor came out.
// fp16 runs scale the loss by parity::kFp16LossScale, 256 (the trainer's
// dynamic scale starts at 65536 and backs off on overflow; a fixed scale
// here must never overflow): unscaled, gradients below fp16's normal range
// (6e-5) would lose precision the model above does not count; an overflow
// fails the case by name; the CPU parity test checks the headroom stays 4x
// (torch_parity.h).
// XRUN_TEST_ERRORS=1 prints every tensor's error and threshold (judged or
// not), to calibrate on a real card; the table after the session has one
// row per run and precision: its worst tensor against its threshold.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "cuda_test_util.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/device/device_info.h"
#include "engine/torch_parity.h"
#include "skip.h"

using namespace xrun;
using namespace xrun::cudatest;
namespace parity = xrun::testing::parity;

namespace {


const nlohmann::json& fixture() {
  static const nlohmann::json f = parity::load_fixture();
  return f;
}

// The CPU engine's values for every tensor of a fixture run, computed once
// and shared by the three precisions.
// "resnet50 step 1 grad conv1.weight" -> "step 1 grad conv1.weight".
std::string without_arch(const std::string& what, const std::string& arch) {
  return what.rfind(arch + " ", 0) == 0 ? what.substr(arch.size() + 1) : what;
}

const Outputs& cpu_outputs(int run_index) {
  static std::map<int, Outputs> cache;
  auto it = cache.find(run_index);
  if (it != cache.end()) return it->second;
  Outputs out;
  cpu::CpuBackend cpu(0);
  parity::run_fixture(cpu, fixture().at("runs").at(run_index),
                      [&](const std::string& what, const std::vector<float>& x,
                          const nlohmann::json&) { out[what] = x; });
  return cache.emplace(run_index, std::move(out)).first->second;
}

void fp32_parity(int run_index) {
  const nlohmann::json& run = fixture().at("runs").at(run_index);
  const std::string arch = run.at("arch");
  auto be = gpu("fp32");
  const parity::Result r = parity::run_parity(*be, run);
  const bool ok = r.worst_ratio <= 1.0 && r.outliers.size() <= static_cast<size_t>(parity::kKinks);
  record({"step", "fp32",
          arch + " vs PyTorch f64, " + std::to_string(r.tensors) + " tensors, " +
              std::to_string(r.outliers.size()) + " kinks; worst " +
              without_arch(r.worst_what, arch),
          "parity", r.worst_ratio, 1.0, ok});
}

void budget_compare(int run_index, const std::string& precision) {
  const nlohmann::json& run = fixture().at("runs").at(run_index);
  const std::string arch = run.at("arch");
  auto be = gpu(precision);
  const parity::BudgetResult r = parity::budget_compare(
      *be, run, precision, cpu_outputs(run_index),
      precision == "fp16" ? parity::kFp16LossScale : 1.0f);
  record({"step", precision,
          arch + " vs CPU, " + std::to_string(r.judged) + " judged, " +
              std::to_string(r.beyond_cap) + " beyond cap; worst " +
              without_arch(r.worst_what, arch),
          "nmse", r.worst_nmse, r.worst_threshold, r.all_ok});
}

// bf16 against the CPU engine's own bf16 (issue 22): the same run, both
// engines rounding activations to bf16, each within the emulated bf16
// budget of float64 (the CPU's is checked in tests/engine/
// bf16_parity_test.cpp), so at most twice that budget apart. Where this CPU
// has no bf16 kernels the case is skipped, not passed.
void cpu_bf16_compare(int run_index) {
  const std::string kernels =
      bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  if (kernels.empty())
    XRUN_SKIP("this CPU has no oneDNN bf16 kernels (AVX512_BF16 or AMX): no CPU bf16 to compare with");
  const nlohmann::json& run = fixture().at("runs").at(run_index);
  const std::string arch = run.at("arch");
  auto be = gpu("bf16");  // skips first where there is no GPU
  Outputs cpu_bf16;
  {
    cpu::CpuBackend cpu(0, Precision::bf16);
    parity::run_fixture(cpu, run,
                        [&](const std::string& what, const std::vector<float>& x,
                            const nlohmann::json&) { cpu_bf16[what] = x; });
  }
  const parity::BudgetResult r =
      parity::budget_compare(*be, run, "bf16", cpu_bf16, 1.0f, 2.0);
  record({"step", "bf16",
          arch + " vs CPU bf16 (" + kernels + "), " + std::to_string(r.judged) + " judged; worst " +
              without_arch(r.worst_what, arch),
          "nmse", r.worst_nmse, r.worst_threshold, r.all_ok});
}

}  // namespace

TEST_CASE("cuda fp32 resnet18: three SGD steps match PyTorch float64 by the CPU engine's rule",
          "[cuda][parity]") {
  fp32_parity(0);
}

TEST_CASE("cuda fp32 resnet50: three SGD steps match PyTorch float64 by the CPU engine's rule",
          "[cuda][parity]") {
  fp32_parity(1);
}

TEST_CASE("cuda tf32/fp16/bf16 resnet18: three SGD steps within the error budget of the CPU",
          "[cuda][parity]") {
  for (const char* p : {"tf32", "fp16", "bf16"}) budget_compare(0, p);
}

TEST_CASE("cuda tf32/fp16/bf16 resnet50: three SGD steps within the error budget of the CPU",
          "[cuda][parity]") {
  for (const char* p : {"tf32", "fp16", "bf16"}) budget_compare(1, p);
}

TEST_CASE("cuda bf16 resnet18 and resnet50: three SGD steps within twice the bf16 budget of "
          "the CPU engine's bf16",
          "[cuda][parity][bf16]") {
  cpu_bf16_compare(0);
  cpu_bf16_compare(1);
}
