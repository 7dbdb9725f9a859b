// tests/device/doctor_test.cpp: `xrun doctor`'s text and JSON reports and its
// exit codes for --require; holds with and without a GPU.
#include "catch2_compat.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/device/device_info.h"
#include "engine/device/doctor.h"

using namespace xrun;

namespace {

struct Report {
  int rc;
  std::string text;   // the report (standard output)
  std::string error;  // standard error
};

Report doctor(bool json, const std::string& require) {
  std::ostringstream out, err;
  int rc = run_doctor(out, err, json, require);
  return {rc, out.str(), err.str()};
}

bool cuda_usable(const CudaInfo& c) {
  for (const auto& g : c.gpus)
    if (g.kernels_supported) return true;
  return false;
}

}  // namespace

TEST_CASE("doctor text report", "[device]") {
  const CudaInfo cuda = query_cuda();
  const CpuInfo cpu = query_cpu();
  const Report r = doctor(false, "");
  INFO(r.text);
  CHECK(r.rc == 0);
  CHECK_THAT(r.text, Catch::Contains(cpu.model));
  CHECK_THAT(r.text, Catch::Contains("oneDNN:         " + cpu.onednn_version + ", ISA " + cpu.onednn_isa));
  CHECK_THAT(r.text, Catch::Contains(cpu.bf16_kernels == "amx" ? "  Trains in:    fp32, bf16 (bf16 on AMX)\n"
                                     : cpu.bf16_kernels.empty()
                                         ? "  Trains in:    fp32 (no bf16 kernels here: bf16 needs AVX512_BF16 or AMX)\n"
                                         : "  Trains in:    fp32, bf16 (bf16 on AVX512_BF16 without AMX"));
  CHECK_THAT(r.text, Catch::Contains(hostname()));
  if (cuda.compiled_with_cuda) {
    CHECK_THAT(r.text, Catch::Contains("cuDNN:          " + format_cudnn_version(cuda.cudnn_loaded)));
    CHECK_THAT(r.text, Catch::Contains("CUDA runtime:   " + format_cuda_version(cuda.runtime_version)));
    CHECK_THAT(r.text, Catch::Contains("cuBLAS:"));
    CHECK_THAT(r.text, Catch::Contains("CUPTI API:"));
  }
  if (cuda.gpus.empty()) {
    CHECK_THAT(r.text, Catch::Contains("No NVIDIA GPU: " + cuda.status + ". xrun will train on the CPU."));
    if (cuda.compiled_with_cuda && cuda.driver_version == 0)
      CHECK_THAT(r.text, Catch::Contains("NVIDIA driver:  not found"));
  } else {
    CHECK_THAT(r.text, !Catch::Contains("No NVIDIA GPU"));
    for (const auto& g : cuda.gpus) {
      CHECK_THAT(r.text, Catch::Contains("GPU " + std::to_string(g.index) + ": " + g.name));
      CHECK_THAT(r.text, Catch::Contains(g.uuid));
      CHECK_THAT(r.text, Catch::Contains("Compute capability: " + g.compute_capability()));
    }
  }
}

TEST_CASE("doctor --require", "[device]") {
  const bool usable = cuda_usable(query_cuda());
  CHECK(doctor(false, "cpu").rc == 0);
  CHECK_THAT(doctor(false, "cpu").text, Catch::Contains("Required device cpu is available."));

  const Report cuda = doctor(false, "cuda");
  INFO(cuda.text);
  if (usable) {
    CHECK(cuda.rc == 0);
    CHECK_THAT(cuda.text, Catch::Contains("Required device cuda is available."));
  } else {
    CHECK(cuda.rc == 1);
    CHECK_THAT(cuda.error, Catch::Contains("required device cuda is not usable: "));
  }

  // A usage error goes to standard error only, in either format.
  const Report bad = doctor(false, "tpu");
  CHECK(bad.rc == 2);
  CHECK(bad.text.empty());
  CHECK_THAT(bad.error, Catch::Contains("--require tpu: unknown device"));
  const Report bad_json = doctor(true, "gpu");
  CHECK(bad_json.rc == 2);
  CHECK(bad_json.text.empty());
  CHECK_THAT(bad_json.error, Catch::Contains("--require gpu: unknown device"));
}

TEST_CASE("doctor JSON report", "[device]") {
  const CudaInfo cuda = query_cuda();
  const CpuInfo cpu = query_cpu();
  const Report r = doctor(true, "");
  INFO(r.text);
  CHECK(r.rc == 0);
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(r.text));
  CHECK(j.at("cpu").at("model") == cpu.model);
  CHECK(j.at("cpu").at("logical_cores") == cpu.logical_cores);
  CHECK(j.at("cpu").at("onednn_version") == cpu.onednn_version);
  CHECK(j.at("cpu").at("onednn_isa") == cpu.onednn_isa);
  CHECK(j.at("cpu").at("bf16_kernels") == cpu.bf16_kernels);
  CHECK(j.at("cpu").at("train_precisions") ==
        (cpu.bf16_kernels.empty() ? nlohmann::json::array({"fp32"})
                                  : nlohmann::json::array({"fp32", "bf16"})));
  CHECK(j.at("cuda").at("status") == cuda.status);
  CHECK(j.at("cuda").at("compiled_with_cuda") == cuda.compiled_with_cuda);
  CHECK(j.at("cuda").at("cudnn").at("loaded") == cuda.cudnn_loaded);
  // Which files were loaded: cuDNN and cuBLAS are linked (their versions
  // need no driver), so a CUDA build names both, as real files.
  for (const char* lib : {"cudnn", "cublas", "cupti_api"}) {
    const std::string file = j.at("cuda").at(lib).at("library");
    INFO(lib << " library: " << file);
    if (file.empty()) {
      CHECK((!cuda.compiled_with_cuda || std::string(lib) == "cupti_api"));
      continue;
    }
    CHECK(file.front() == '/');
    CHECK(std::ifstream(file).good());
    CHECK(file.find(std::string("lib") + (std::string(lib) == "cupti_api" ? "cupti" : lib)) !=
          std::string::npos);
  }
  if (cuda.compiled_with_cuda) CHECK_FALSE(cuda.cudnn_library.empty());
  // NCCL: loaded or why not, in every build; a library loaded is named
  // with its version ("libnccl.so.2 (NCCL 2.28.9)").
  const nlohmann::json& nccl = j.at("cuda").at("nccl");
  if (nccl.at("loaded") == true)
    CHECK_THAT(nccl.at("library").get<std::string>(), Catch::Contains("libnccl") &&
                                                          Catch::Contains("(NCCL 2."));
  else
    CHECK_FALSE(nccl.at("why_not").get<std::string>().empty());
  CHECK(j.at("cuda").at("driver_version") == cuda.driver_version);
  CHECK(j.at("host") == hostname());
  CHECK(j.at("ok") == true);
  REQUIRE(j.at("gpus").is_array());
  CHECK(j.at("gpus").size() == cuda.gpus.size());
  // The interconnect section is always there: a card each, the peer matrix
  // with two or more, the all-reduce path.
  const nlohmann::json& ic = j.at("interconnect");
  CHECK(ic.at("gpus").size() == cuda.gpus.size());
  CHECK(ic.at("peer_access").size() == (cuda.gpus.size() >= 2 ? cuda.gpus.size() : 0));
  CHECK(ic.at("allreduce_path").is_string());
  if (cuda.gpus.empty()) CHECK(ic.at("allreduce_path") == "no GPU");
  if (cuda.gpus.empty()) {
    CHECK(j.at("gpus") == nlohmann::json::array());
    CHECK(j.at("train_device") == "cpu");
  } else {
    for (size_t i = 0; i < cuda.gpus.size(); ++i) {
      CHECK(j["gpus"][i].at("name") == cuda.gpus[i].name);
      CHECK(j["gpus"][i].at("uuid") == cuda.gpus[i].uuid);
      CHECK(j["gpus"][i].at("precisions") == cuda.gpus[i].train_precisions());
    }
  }

  const Report req = doctor(true, "cuda");
  const auto jr = nlohmann::json::parse(req.text);
  CHECK(jr.at("require") == "cuda");
  if (cuda_usable(cuda)) {
    CHECK(req.rc == 0);
    CHECK(jr.at("ok") == true);
  } else {
    CHECK(req.rc == 1);
    CHECK(jr.at("ok") == false);
    CHECK_THAT(jr.at("error").get<std::string>(), Catch::Contains("not usable"));
  }
}
