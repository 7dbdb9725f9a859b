// tests/profiler/findings_test.cpp: the troubleshooting checks fire on the
// figures they read, and only then.
#include "catch2_compat.h"

#include "profiler/findings.h"

using namespace xrun;

namespace {
bool has(const std::vector<profiler::Finding>& f, const std::string& check) {
  for (const auto& x : f)
    if (x.check == check) return true;
  return false;
}
}  // namespace

TEST_CASE("findings: a healthy CPU run has none", "[profiler][findings]") {
  RunConfig cfg;
  RunSummary s;
  s.measured_steps = 100;
  s.data_wait_fraction = 0.01;
  CHECK(profiler::run_findings(cfg, s).empty());
}

TEST_CASE("findings: each check on its own figure", "[profiler][findings]") {
  RunConfig cfg;
  cfg.train.device = Device::parse("cuda:0");
  cfg.train.cudnn_benchmark = CudnnBenchmark::on;
  cfg.data.workers = 2;
  RunSummary s;
  s.measured_steps = 50;
  SECTION("waiting for data: workers, and pinned memory on a GPU") {
    s.data_wait_fraction = 0.3;
    const auto f = profiler::run_findings(cfg, s);
    REQUIRE(f.size() == 1);
    CHECK(f[0].check == "data_wait");
    CHECK(f[0].value == 0.3);
    CHECK_THAT(f[0].message, Catch::Contains("30.0%") && Catch::Contains("data.workers (now 2)") &&
                                 Catch::Contains("pin_memory"));
  }
  SECTION("loss-scale back-offs") {
    s.skipped_steps = 3;
    CHECK(has(profiler::run_findings(cfg, s), "loss_scale_backoff"));
  }
  SECTION("cuDNN autotuning off on a GPU, never on the CPU") {
    cfg.train.cudnn_benchmark = CudnnBenchmark::off;
    CHECK(has(profiler::run_findings(cfg, s), "cudnn_benchmark_off"));
    cfg.train.device = Device{};
    CHECK_FALSE(has(profiler::run_findings(cfg, s), "cudnn_benchmark_off"));
  }
  SECTION("unsteady steps and too few of them") {
    s.step_outliers = 2;
    s.measured_steps = 4;
    const auto f = profiler::run_findings(cfg, s);
    CHECK(has(f, "step_outliers"));
    CHECK(has(f, "few_measured_steps"));
  }
}
