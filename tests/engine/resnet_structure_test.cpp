// tests/engine/resnet_structure_test.cpp: the one model definition against
// torchvision: every state_dict name, shape and order (fixture made by
// torchvision 0.14, tests/engine/fixtures/torchvision_state_dicts.json) and
// the parameter counts, for resnet18/34/50/101/152 with 10 and 1000 classes.
#include "catch2_compat.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "engine/cpu/cpu_backend.h"
#include "engine/device/device_info.h"
#include "engine/model/resnet.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

void check_against_torchvision(const std::string& arch, int classes) {
  const auto fixture = testing::load_fixture("torchvision_state_dicts.json");
  const auto& expected = fixture.at("models").at(arch + "_" + std::to_string(classes));
  cpu::CpuBackend be(1);
  ModelSpec spec;
  spec.arch = arch;
  spec.num_classes = classes;
  spec.batch = 1;
  spec.image_size = 32;
  ResNet model(be, spec);

  CHECK(model.parameter_count() == expected.at("parameters").get<int64_t>());
  const auto& sd = expected.at("state_dict");
  REQUIRE(model.state().size() == sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    const StateEntry& e = model.state()[i];
    INFO(arch << " entry " << i);
    CHECK(e.name == sd[i][0].get<std::string>());
    CHECK(e.dims == sd[i][1].get<std::vector<int64_t>>());
    const bool counter = sd[i][2].get<std::string>() == "int64";
    CHECK((e.kind == StateEntry::Kind::counter) == counter);
  }
}

}  // namespace

TEST_CASE("resnet50 has torchvision's state_dict and parameter counts", "[model]") {
  SECTION("10 classes: 23,528,522 parameters") {
    check_against_torchvision("resnet50", 10);
    const auto f = testing::load_fixture("torchvision_state_dicts.json");
    CHECK(f.at("models").at("resnet50_10").at("parameters") == 23528522);
  }
  SECTION("1000 classes: 25,557,032 parameters") {
    check_against_torchvision("resnet50", 1000);
    const auto f = testing::load_fixture("torchvision_state_dicts.json");
    CHECK(f.at("models").at("resnet50_1000").at("parameters") == 25557032);
  }
}

TEST_CASE("resnet18 34 101 and 152 have torchvision state_dicts", "[model]") {
  for (const char* arch : {"resnet18", "resnet34", "resnet101", "resnet152"})
    for (int classes : {10, 1000}) check_against_torchvision(arch, classes);
}

TEST_CASE("an unknown arch is refused by name", "[model]") {
  cpu::CpuBackend be(1);
  ModelSpec spec;
  spec.arch = "resnet51";
  REQUIRE_THROWS_WITH(ResNet(be, spec), Catch::Contains("resnet51") && Catch::Contains("resnet50"));
}

TEST_CASE("initialisation follows torchvision", "[model]") {
  cpu::CpuBackend be(1);
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.batch = 1;
  spec.image_size = 32;
  ResNet model(be, spec);
  be.allocate();
  model.init_parameters(7);
  auto values = [&](const std::string& name) {
    for (const StateEntry& e : model.state())
      if (e.name == name) {
        std::vector<float> v(e.tensor->numel());
        be.read(e.tensor, v);
        return v;
      }
    FAIL("no " << name);
    return std::vector<float>{};
  };
  auto mean_std = [](const std::vector<float>& v) {
    double m = 0, q = 0;
    for (float x : v) m += x;
    m /= v.size();
    for (float x : v) q += (x - m) * (x - m);
    return std::pair<double, double>{m, std::sqrt(q / v.size())};
  };
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * kh * kw)).
  const auto [m3, s3] = mean_std(values("layer3.0.conv2.weight"));  // 256 x 256 x 3 x 3
  CHECK(std::fabs(m3) < 0.001);
  CHECK(s3 == Approx(std::sqrt(2.0 / (256 * 9))).epsilon(0.01));
  // BN: weight 1, bias 0, running mean 0, running var 1.
  for (float x : values("layer2.1.bn1.weight")) CHECK(x == 1.0f);
  for (float x : values("layer2.1.bn1.bias")) CHECK(x == 0.0f);
  for (float x : values("bn1.running_var")) CHECK(x == 1.0f);
  // nn.Linear's default: uniform in +-1/sqrt(fan_in), fan_in 512.
  const auto fc = values("fc.weight");
  const float bound = 1.0f / std::sqrt(512.0f);
  for (float x : fc) CHECK(std::fabs(x) <= bound);
  CHECK(mean_std(fc).second == Approx(bound / std::sqrt(3.0)).epsilon(0.05));
  // The same seed, the same weights; another seed, others.
  const auto again = values("layer3.0.conv2.weight");
  model.init_parameters(7);
  CHECK(values("layer3.0.conv2.weight") == again);
  model.init_parameters(8);
  CHECK(values("layer3.0.conv2.weight") != again);
}

// The run's environment names the kernel every pass of every op runs
// (onednn_kernels: "conv fwd: IMPL xN, ...; conv bwd_data: ..."), so a stored
// run says what ran. resnet18 has 20 convolutions (conv1 without dx), one
// fc, two poolings; at 32x32 its layer3 and layer4 run as GEMMs, the rest
// as oneDNN convolutions: both must be counted. In bf16 (where this CPU
// can) the same counts hold.
TEST_CASE("the CPU backend names the kernel of every op in the run's environment", "[model]") {
  const std::string bf16 = bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  std::vector<Precision> precisions = {Precision::fp32};
  if (!bf16.empty()) precisions.push_back(Precision::bf16);
  for (Precision p : precisions) {
    INFO(to_string(p));
    cpu::CpuBackend be(1, p);
    ModelSpec spec;
    spec.arch = "resnet18";
    spec.batch = 2;
    spec.image_size = 32;
    ResNet model(be, spec);
    const std::string kernels = be.environment().get("onednn_kernels");
    INFO(kernels);
    std::map<std::string, int> ops;  // pass -> ops counted
    std::set<std::string> impls;
    const std::regex pass_re(R"((?:^|; )([a-z_ ]+): ([^;]+))"), impl_re(R"(([^,]+) x(\d+))");
    for (std::sregex_iterator it(kernels.begin(), kernels.end(), pass_re), end; it != end; ++it) {
      const std::string pass = (*it)[1], list = (*it)[2];
      for (std::sregex_iterator jt(list.begin(), list.end(), impl_re); jt != end; ++jt) {
        std::string impl = (*jt)[1];
        impl.erase(0, impl.find_first_not_of(' '));
        CHECK(!impl.empty());
        impls.insert(impl);
        ops[pass] += std::stoi((*jt)[2]);
      }
    }
    CHECK(ops["conv fwd"] == 20);
    CHECK(ops["conv bwd_weights"] == 20);
    CHECK(ops["conv bwd_data"] == 19);
    CHECK(ops["fc fwd"] == 1);
    CHECK(ops["pool fwd"] == 2);
    // the small maps' GEMMs: sgemm in fp32, oneDNN matmuls in bf16 on AMX
    const bool gemm = impls.count("dnnl_sgemm") > 0 ||
                      std::any_of(impls.begin(), impls.end(), [](const std::string& i) {
                        return i.rfind("matmul ", 0) == 0;
                      });
    if (p == Precision::fp32 || bf16 == "amx") CHECK(gemm);
    CHECK(impls.size() >= 3);
  }
}
