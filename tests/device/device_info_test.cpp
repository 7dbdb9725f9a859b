// tests/device/device_info_test.cpp: query_cuda, query_cpu, version
// formatting, precision rules and collect_environment. Written to hold on a
// machine with no driver (the build machines) and on a GPU machine alike:
// GPU-only assertions branch on query_cuda().gpus.empty().
#include "catch2_compat.h"

#include <fstream>
#include <stdexcept>
#include <thread>

#include <oneapi/dnnl/dnnl.h>

#include "engine/device/device_info.h"

using namespace xrun;

namespace {

std::string cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t\r\n") + 1);
    return v;
  }
  return "";
}

}  // namespace

TEST_CASE("query_cuda never fails and reports what it can", "[device]") {
  const CudaInfo c = query_cuda();
  INFO("status: " << c.status);
  CHECK_FALSE(c.status.empty());
#ifdef XRUN_HAVE_CUDA
  CHECK(c.compiled_with_cuda);
  CHECK(c.runtime_version >= 12000);
  CHECK(c.cudnn_compiled >= 90000);
  CHECK(c.cudnn_loaded > 0);
  CHECK(c.cudnn_loaded / 10000 == c.cudnn_compiled / 10000);  // same cuDNN major (ABI)
  CHECK(c.cublas_compiled > 0);
  CHECK(c.cublas_loaded > 0);
  CHECK(c.cublas_loaded / 10000 == c.cublas_compiled / 10000);
  CHECK(c.cupti_api_compiled > 0);
  CHECK(c.cupti_api_loaded > 0);
  CHECK_FALSE(c.cuda_architectures.empty());
#else
  CHECK_FALSE(c.compiled_with_cuda);
  CHECK_THAT(c.status, Catch::Contains("without CUDA"));
#endif

  if (c.gpus.empty()) {
    if (c.compiled_with_cuda && c.driver_version == 0) {
      // No driver (the build machines): cudaErrorInsufficientDriver, or the
      // stub library (34) when something put lib64/stubs on the path.
      CHECK_FALSE(c.driver_compatible);
      CHECK((c.device_count_error == 35 || c.device_count_error == 34));
      if (c.device_count_error == 35) {
        CHECK_THAT(c.status, Catch::StartsWith("no NVIDIA driver found (cudaGetDeviceCount: "));
        CHECK_THAT(c.status, Catch::Contains("driver version is insufficient"));
      }
    }
  } else {
    CHECK(c.compiled_with_cuda);
    CHECK(c.driver_version > 0);
    CHECK(c.driver_compatible);
    CHECK(c.device_count_error == 0);
    CHECK(c.status == std::to_string(c.gpus.size()) + (c.gpus.size() == 1 ? " GPU" : " GPUs"));
    for (size_t i = 0; i < c.gpus.size(); ++i) {
      const GpuInfo& g = c.gpus[i];
      INFO("GPU " << i << ": " << g.name);
      CHECK(g.index == static_cast<int>(i));
      CHECK_FALSE(g.name.empty());
      CHECK(g.cc_major >= 5);
      CHECK(g.sm_count > 0);
      CHECK(g.memory_bytes > (int64_t{1} << 30));
      CHECK(g.clock_mhz > 0);
      CHECK(g.memory_bus_width > 0);
      CHECK_THAT(g.uuid, Catch::StartsWith("GPU-"));
      CHECK(g.uuid.size() == 40);  // GPU- + 8-4-4-4-12
      CHECK(g.tf32 == (g.cc_major >= 8));
      CHECK(g.bf16 == (g.cc_major >= 8));
    }
  }
}

TEST_CASE("query_cuda leaves no error behind and is repeatable", "[device]") {
  const CudaInfo a = query_cuda();
  const CudaInfo b = query_cuda();
  CHECK(a.status == b.status);
  CHECK(a.gpus.size() == b.gpus.size());
  CHECK(a.driver_version == b.driver_version);
  CHECK(a.cudnn_loaded == b.cudnn_loaded);
}

TEST_CASE("precisions follow the compute capability", "[device]") {
  auto precisions = [](int major, int minor) {
    GpuInfo g;
    g.cc_major = major;
    g.cc_minor = minor;
    set_precisions(g);
    return g;
  };
  CHECK(precisions(5, 2).train_precisions() == std::vector<std::string>{"fp32"});
  CHECK(precisions(5, 3).train_precisions() == std::vector<std::string>{"fp32", "fp16"});
  CHECK_FALSE(precisions(6, 1).fp16_tensor_cores);
  CHECK(precisions(7, 0).fp16_tensor_cores);
  CHECK(precisions(7, 5).train_precisions() == std::vector<std::string>{"fp32", "fp16"});
  for (auto [major, minor] : {std::pair{8, 0}, {8, 6}, {8, 9}, {9, 0}, {12, 0}}) {
    GpuInfo g = precisions(major, minor);
    CHECK(g.train_precisions() == std::vector<std::string>{"fp32", "tf32", "fp16", "bf16"});
    CHECK(g.fp16_tensor_cores);
  }
  CHECK(precisions(8, 9).compute_capability() == "8.9");
  CHECK(precisions(12, 0).compute_capability() == "12.0");
}

TEST_CASE("version formatting", "[device]") {
  CHECK(format_cuda_version(13000) == "13.0");
  CHECK(format_cuda_version(12040) == "12.4");
  CHECK(format_cuda_version(11080) == "11.8");
  CHECK(format_cuda_version(0).empty());
  CHECK(format_cudnn_version(91900) == "9.19.0");
  CHECK(format_cudnn_version(90100) == "9.1.0");
  CHECK(format_cudnn_version(8907) == "8.9.7");
  CHECK(format_cublas_version(130100) == "13.1.0");
  CHECK(format_cublas_version(120402) == "12.4.2");
}

TEST_CASE("the driver floor: which driver runs which CUDA, and what doctor tells a user whose "
          "driver cannot run this build",
          "[device]") {
  CHECK(minimum_driver_branch(13000) == 580);
  CHECK(minimum_driver_branch(12020) == 525);
  CHECK(minimum_driver_branch(12090) == 525);
  CHECK(minimum_driver_branch(11080) == 0);
  // A CUDA 13 build on driver 535 (an RTX 3090 or 4090D set up with CUDA 12.2).
  CHECK(driver_advice(13000, 12020, "535.104.05") ==
        "this build needs driver >= 580 for CUDA 13.0; yours is 535.104.05, which runs CUDA 12.2: "
        "rebuild with CUDA 12.x (README, \"On a GPU\") or update the driver");
  // Minor version compatibility: a CUDA 12.4 build runs on a 12.0 driver (525).
  CHECK(driver_advice(12040, 12000, "525.60.13").empty());
  CHECK(driver_advice(12020, 12080, "570.1").empty());
  CHECK(driver_advice(13000, 13010, "").empty());
  // No driver answered: nothing to advise here (doctor says "no driver").
  CHECK(driver_advice(13000, 0, "").empty());
  // Below CUDA 12 no build of xrun helps: only a newer driver.
  CHECK(driver_advice(12020, 11040, "") ==
        "this build needs driver >= 525 for CUDA 12.2; yours is a driver, which runs CUDA 11.4: "
        "update the driver (525 or newer runs a build with CUDA 12.x)");
}

TEST_CASE("query_cpu matches /proc/cpuinfo and the thread count", "[device]") {
  const CpuInfo cpu = query_cpu();
  const std::string model = cpuinfo_value("model name");
  if (!model.empty()) CHECK(cpu.model == model);
  CHECK_FALSE(cpu.model.empty());
  CHECK(cpu.logical_cores == static_cast<int>(std::thread::hardware_concurrency()));
  CHECK(cpu.physical_cores >= 1);
  CHECK(cpu.physical_cores <= cpu.logical_cores);

  const dnnl_version_t* v = dnnl_version();
  CHECK(cpu.onednn_version == std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                  std::to_string(v->patch));
  CHECK_FALSE(cpu.onednn_isa.empty());
  CHECK_THAT(cpu.onednn_isa, !Catch::StartsWith("isa 0x"));
  if (dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx2) CHECK(cpu.onednn_isa == "avx2");
  if (dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16)
    CHECK(cpu.onednn_isa == "avx512_core_bf16");

  std::string flags(1, ' ');
  flags.append(cpuinfo_value("flags")).append(1, ' ');
  CHECK_FALSE(cpu.flags_summary.empty());
  if (flags.find(" avx2 ") != std::string::npos) CHECK_THAT(cpu.flags_summary, Catch::Contains("avx2"));
  if (flags.find(" avx512f ") != std::string::npos)
    CHECK_THAT(cpu.flags_summary, Catch::Contains("avx512f"));
  if (flags.find(" amx_tile ") != std::string::npos)
    CHECK_THAT(cpu.flags_summary, Catch::Contains("amx_tile"));
}

TEST_CASE("bf16 kernels follow oneDNN's ISA: AMX, AVX512_BF16 alone, or none", "[device]") {
  CHECK(bf16_kernels_for_isa(dnnl_cpu_isa_avx512_core_amx) == "amx");
  CHECK(bf16_kernels_for_isa(dnnl_cpu_isa_avx512_core_bf16) == "avx512_bf16");
  CHECK(bf16_kernels_for_isa(dnnl_cpu_isa_avx512_core_vnni) == "");
  CHECK(bf16_kernels_for_isa(dnnl_cpu_isa_avx512_core) == "");
  CHECK(bf16_kernels_for_isa(dnnl_cpu_isa_avx2) == "");

  // This machine: what query_cpu says agrees with the CPU's flags.
  const CpuInfo cpu = query_cpu();
  CHECK(cpu.bf16_kernels == bf16_kernels_for_isa(dnnl_get_effective_cpu_isa()));
  std::string flags(1, ' ');
  flags.append(cpuinfo_value("flags")).append(1, ' ');
  if (cpu.bf16_kernels == "amx") CHECK(flags.find(" amx_bf16 ") != std::string::npos);
  if (!cpu.bf16_kernels.empty()) CHECK(flags.find(" avx512_bf16 ") != std::string::npos);
  if (flags.find(" avx512_bf16 ") == std::string::npos) CHECK(cpu.bf16_kernels.empty());
}

TEST_CASE("host and OS", "[device]") {
  CHECK_FALSE(hostname().empty());
  CHECK_THAT(os_description(), Catch::StartsWith("Linux "));
#if defined(__clang__)
  CHECK_THAT(compiler_description(),
             Catch::StartsWith("Clang " + std::to_string(__clang_major__) + "."));
#else
  CHECK(compiler_description() == "GCC " + std::to_string(__GNUC__) + "." +
                                      std::to_string(__GNUC_MINOR__) + "." +
                                      std::to_string(__GNUC_PATCHLEVEL__));
#endif
}

TEST_CASE("collect_environment for the CPU", "[device]") {
  const Environment env = collect_environment("cpu");
  for (const char* key : {"host", "cpu", "cpu_cores", "onednn", "onednn_isa", "xrun_version",
                          "git_commit", "os", "device", "device_name"}) {
    INFO("key " << key);
    CHECK_FALSE(env.get(key).empty());
  }
  CHECK(env.get("device") == "cpu");
  CHECK(env.get("device_name") == query_cpu().model);
  CHECK(env.get("cpu") == query_cpu().model);
  CHECK(env.get("cpu_cores") == std::to_string(std::thread::hardware_concurrency()));
  CHECK(env.get("onednn") == query_cpu().onednn_version);
  CHECK(env.get("host") == hostname());
  CHECK(env.get("compiler") == compiler_description());
  CHECK(env.fields.count("device_uuid") == 0);
}

TEST_CASE("collect_environment for a CUDA device", "[device]") {
  const CudaInfo cuda = query_cuda();
  const Environment env = collect_environment("cuda:0");
  CHECK(env.get("device") == "cuda:0");
  CHECK_FALSE(env.get("cpu").empty());
  CHECK_FALSE(env.get("xrun_version").empty());
#ifdef XRUN_HAVE_CUDA
  CHECK(env.get("cuda_runtime") == format_cuda_version(cuda.runtime_version));
  CHECK(env.get("cudnn") == format_cudnn_version(cuda.cudnn_loaded));
  CHECK_FALSE(env.get("cudnn").empty());
  CHECK_FALSE(env.get("cublas").empty());
  CHECK_FALSE(env.get("cupti").empty());
#endif
  if (cuda.gpus.empty()) {
    CHECK(env.get("cuda_status") == cuda.status);
    CHECK(env.fields.count("device_uuid") == 0);
  } else {
    const GpuInfo& g = cuda.gpus.front();
    CHECK(env.get("device_name") == g.name);
    CHECK(env.get("device_uuid") == g.uuid);
    CHECK(env.get("compute_capability") == g.compute_capability());
    CHECK(env.get("sm_count") == std::to_string(g.sm_count));
    CHECK(env.get("memory_bytes") == std::to_string(g.memory_bytes));
    CHECK_FALSE(env.get("driver").empty());
  }
  CHECK(collect_environment("cuda").get("device") == "cuda");
}

TEST_CASE("collect_environment refuses unknown devices", "[device]") {
  CHECK_THROWS_AS(collect_environment("tpu"), std::invalid_argument);
  CHECK_THROWS_AS(collect_environment("cuda:"), std::invalid_argument);
  CHECK_THROWS_AS(collect_environment("cuda:x"), std::invalid_argument);
  CHECK_THROWS_AS(collect_environment(""), std::invalid_argument);
}
