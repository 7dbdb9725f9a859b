// tests/engine/bf16_parity_test.cpp: the CPU engine in bf16 (issue 22) on the
// parity fixture's runs (resnet18 and resnet50 at 64x64, three SGD steps;
// tests/engine/torch_parity.h), judged by the budget the CUDA engine's bf16
// meets (tests/cuda/cuda_parity_test.cpp): each tensor's NMSE against the
// CPU engine's fp32 result within what float64 runs with every op's output
// and gradient rounded at bf16's 2^-8 moved it (the fixture's emulated
// runs), times the parity rule's factor. The same runs then serve as the
// CPU-bf16 reference of the CUDA bf16 comparison. Skipped, saying why, on a
// CPU without oneDNN bf16 kernels (AVX512_BF16 or AMX).
#include "catch2_compat.h"

#include <map>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/device/device_info.h"
#include "skip.h"
#include "torch_parity.h"

using namespace xrun;
namespace parity = xrun::testing::parity;

namespace {

void cpu_bf16_within_budget(int run_index) {
  const std::string kernels =
      bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  if (kernels.empty())
    XRUN_SKIP("this CPU has no oneDNN bf16 kernels (needs AVX512_BF16 or AMX; oneDNN's ISA here: "
              << query_cpu().onednn_isa << ")");
  const nlohmann::json f = parity::load_fixture();
  const nlohmann::json& run = f.at("runs").at(run_index);
  std::map<std::string, std::vector<float>> fp32;
  {
    cpu::CpuBackend be(0);
    parity::run_fixture(be, run,
                        [&](const std::string& what, const std::vector<float>& x,
                            const nlohmann::json&) { fp32[what] = x; });
  }
  cpu::CpuBackend be(0, Precision::bf16);
  const parity::BudgetResult r = parity::budget_compare(be, run, "bf16", fp32);
  std::printf("cpu bf16 (%s) %s: %d tensors judged, %d beyond the cap; worst %s at %.2f of its "
              "budget\n",
              kernels.c_str(), run.at("arch").get<std::string>().c_str(), r.judged, r.beyond_cap,
              r.worst_what.c_str(), r.worst_ratio);
}

}  // namespace

TEST_CASE("CPU engine in bf16: resnet18, three SGD steps within the emulated bf16 budget",
          "[parity][bf16]") {
  cpu_bf16_within_budget(0);
}

TEST_CASE("CPU engine in bf16: resnet50, three SGD steps within the emulated bf16 budget",
          "[parity][bf16]") {
  cpu_bf16_within_budget(1);
}

// The backend's own check (make_backend and every CpuBackend): where oneDNN
// has no bf16 kernels (ctest runs this case again with ONEDNN_MAX_CPU_ISA=
// AVX2) a bf16 backend is refused naming oneDNN's ISA; where it has them, it
// is made. fp16 and tf32 are refused on every CPU.
TEST_CASE("CPU backend: bf16 made where oneDNN has bf16 kernels, refused naming the ISA where "
          "not, and fp16 and tf32 refused",
          "[bf16][precision]") {
  const CpuInfo cpu = query_cpu();
  std::printf("oneDNN ISA %s, bf16 kernels: %s\n", cpu.onednn_isa.c_str(),
              cpu.bf16_kernels.empty() ? "none" : cpu.bf16_kernels.c_str());
  if (cpu.bf16_kernels.empty()) {
    try {
      cpu::CpuBackend be(1, Precision::bf16);
      FAIL("expected a bf16 backend to be refused on " << cpu.onednn_isa);
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == cpu_bf16_refusal(cpu.onednn_isa));
      CHECK_THAT(e.what(), Catch::Contains("ISA on this CPU is " + cpu.onednn_isa));
    }
  } else {
    cpu::CpuBackend be(1, Precision::bf16);
    CHECK(be.precision() == Precision::bf16);
    CHECK(be.activation_type() == dnnl::memory::data_type::bf16);
  }
  for (Precision p : {Precision::fp16, Precision::tf32}) {
    BackendOptions options;
    options.threads = 1;
    options.precision = p;
    CHECK_THROWS_WITH(make_backend("cpu", options),
                      Catch::Contains("needs a CUDA device; the CPU engine trains in fp32 and bf16"));
  }
}
