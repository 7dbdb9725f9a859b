// engine/device/device_info.cpp: the parts of the device report that do not
// need CUDA headers: CPU and oneDNN, host and OS, NVML's driver release,
// version formatting, precision rules, and the Environment record.
#include "engine/device/device_info.h"
#include "engine/device/interconnect.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "engine/cpu/dnnl_compat.h"

#include "xrun_version.h"

namespace xrun {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

// --- GPU helpers -------------------------------------------------------------

std::string GpuInfo::compute_capability() const {
  return std::to_string(cc_major) + "." + std::to_string(cc_minor);
}

std::vector<std::string> GpuInfo::train_precisions() const {
  std::vector<std::string> out{"fp32"};
  if (tf32) out.push_back("tf32");
  if (fp16) out.push_back("fp16");
  if (bf16) out.push_back("bf16");
  return out;
}

void set_precisions(GpuInfo& gpu) {
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  gpu.tf32 = cc >= 80;
  gpu.bf16 = cc >= 80;
  gpu.fp16 = cc >= 53;
  gpu.fp16_tensor_cores = cc >= 70;
}

std::string format_cuda_version(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

int minimum_driver_branch(int cuda_version) {
  if (cuda_version >= 13000) return 580;
  if (cuda_version >= 12000) return 525;
  return 0;
}

std::string driver_advice(int runtime_version, int driver_version, const std::string& driver_release) {
  if (driver_version <= 0 || runtime_version <= 0) return "";
  // Minor version compatibility: a driver of the same CUDA major runs any
  // runtime of that major.
  if (driver_version >= runtime_version || driver_version / 1000 == runtime_version / 1000)
    return "";
  const int branch = minimum_driver_branch(runtime_version);
  const std::string needs =
      branch > 0 ? "driver >= " + std::to_string(branch) : std::string("a newer driver");
  const std::string head =
      "this build needs " + needs + " for CUDA " + format_cuda_version(runtime_version) +
      "; yours is " + (driver_release.empty() ? std::string("a driver") : driver_release) +
      ", which runs CUDA " + format_cuda_version(driver_version) + ": ";
  // xrun builds with CUDA 12.2 and newer: below 12, only a new driver helps.
  if (driver_version < 12020)
    return head + "update the driver (525 or newer runs a build with CUDA 12.x)";
  return head + "rebuild with CUDA " + std::to_string(driver_version / 1000) +
         ".x (README, \"On a GPU\") or update the driver";
}

std::string format_cudnn_version(int version) {
  if (version <= 0) return "";
  if (version >= 90000)
    return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
           std::to_string(version % 100);
  return std::to_string(version / 1000) + "." + std::to_string(version / 100 % 10) + "." +
         std::to_string(version % 100);
}

std::string format_cublas_version(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string nvml_driver_release() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "";
  using init_fn = int (*)();
  using version_fn = int (*)(char*, unsigned int);
  auto init = reinterpret_cast<init_fn>(::dlsym(lib, "nvmlInit_v2"));
  auto get_version = reinterpret_cast<version_fn>(::dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<init_fn>(::dlsym(lib, "nvmlShutdown"));
  std::string release;
  if (init != nullptr && get_version != nullptr && init() == 0) {  // 0 = NVML_SUCCESS
    char buf[96] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    if (get_version(buf, sizeof buf) == 0) release = buf;
    if (shutdown != nullptr) shutdown();
  }
  ::dlclose(lib);
  return release;
}

// --- CPU and host --------------------------------------------------------------

CpuInfo query_cpu() {
  CpuInfo cpu;
  cpu.logical_cores = static_cast<int>(std::thread::hardware_concurrency());

  std::ifstream in("/proc/cpuinfo");
  std::string line, physical_id = "0", flags, fallback_model;
  std::set<std::pair<std::string, std::string>> cores;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "model name" && cpu.model.empty()) cpu.model = value;
    else if ((key == "Hardware" || key == "cpu model" || key == "uarch") && fallback_model.empty())
      fallback_model = value;
    else if (key == "physical id") physical_id = value;
    else if (key == "core id") cores.insert({physical_id, value});
    else if ((key == "flags" || key == "Features") && flags.empty()) {
      flags.append(1, ' ').append(value).append(1, ' ');
    }
  }
  if (cpu.model.empty()) cpu.model = fallback_model;
  if (cpu.model.empty()) {
    struct utsname u {};
    cpu.model = ::uname(&u) == 0 ? std::string(u.machine) + " CPU" : "unknown CPU";
  }
  cpu.physical_cores = cores.empty() ? cpu.logical_cores : static_cast<int>(cores.size());

  // The flags that decide which oneDNN kernels (and precisions) are fast.
  // (Strings are built with append: GCC 12 warns falsely on `" " + s`.)
  static const char* const kInteresting[] = {
      "avx",         "avx2",        "fma",          "avx512f", "avx512_vnni", "avx512_bf16",
      "avx512_fp16", "amx_tile",    "amx_bf16",     "amx_int8", "asimd",      "sve",
      "sve2",        "bf16"};
  for (const char* f : kInteresting) {
    std::string needle(1, ' ');
    needle.append(f).append(1, ' ');
    if (flags.find(needle) != std::string::npos) {
      if (!cpu.flags_summary.empty()) cpu.flags_summary += ' ';
      cpu.flags_summary += f;
    }
  }
  if (cpu.flags_summary.empty()) cpu.flags_summary = "none of avx2/avx512/amx";

  const dnnl_version_t* v = dnnl_version();
  cpu.onednn_version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                       std::to_string(v->patch);
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char* name = cpu::dnnl_compat::isa_name(isa);
  if (name != nullptr) {
    cpu.onednn_isa = name;
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "isa 0x%x", static_cast<unsigned>(isa));
    cpu.onednn_isa = buf;
  }
  cpu.bf16_kernels = bf16_kernels_for_isa(static_cast<unsigned>(isa));
  return cpu;
}

std::string bf16_kernels_for_isa(unsigned isa) {
  const auto has = [isa](dnnl_cpu_isa_t want) {
    return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
  };
  if (has(dnnl_cpu_isa_avx512_core_amx)) return "amx";
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return "avx512_bf16";
  return "";
}

std::vector<int> usable_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty())
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c)
      cpus.push_back(static_cast<int>(c));
  return cpus;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) {
      text += '-';
      text += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return text;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string os_description() {
  struct utsname u {};
  if (::uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

std::string compiler_description() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

std::string distro() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
    std::string value = line.substr(12);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\''))
      value = value.substr(1, value.size() - 2);
    return value;
  }
  return "";
}

// --- Environment --------------------------------------------------------------

Environment collect_environment(const std::string& device) {
  int cuda_index = -1;
  if (device == "cuda") {
    cuda_index = 0;
  } else if (device.rfind("cuda:", 0) == 0) {
    const std::string n = device.substr(5);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("unknown device \"" + device + "\" (expected cpu or cuda:N)");
    cuda_index = std::stoi(n);
  } else if (device != "cpu") {
    throw std::invalid_argument("unknown device \"" + device + "\" (expected cpu or cuda:N)");
  }

  Environment env;
  auto& f = env.fields;
  const CpuInfo cpu = query_cpu();
  f["device"] = device;
  f["host"] = hostname();
  f["cpu"] = cpu.model;
  f["cpu_cores"] = std::to_string(cpu.logical_cores);
  f["cpu_physical_cores"] = std::to_string(cpu.physical_cores);
  f["cpu_affinity"] = cpu_list_text(usable_cpus());
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) f["cuda_visible_devices"] = visible;
  f["onednn"] = cpu.onednn_version;
  f["onednn_isa"] = cpu.onednn_isa;
  f["xrun_version"] = XRUN_VERSION;
  f["git_commit"] = XRUN_GIT_COMMIT;
  f["os"] = os_description();
  f["distro"] = distro();
  f["compiler"] = compiler_description();

  if (cuda_index < 0) {
    f["device_name"] = cpu.model;
    return env;
  }
  const CudaInfo cuda = query_cuda();
  f["cuda_runtime"] = format_cuda_version(cuda.runtime_version);
  f["driver_cuda"] = format_cuda_version(cuda.driver_version);
  f["driver"] = !cuda.driver_release.empty() ? cuda.driver_release
                                             : format_cuda_version(cuda.driver_version);
  f["cudnn"] = format_cudnn_version(cuda.cudnn_loaded);
  f["cublas"] = format_cublas_version(cuda.cublas_loaded);
  f["cupti"] = cuda.cupti_api_loaded > 0 ? std::to_string(cuda.cupti_api_loaded) : "";
  if (static_cast<size_t>(cuda_index) < cuda.gpus.size()) {
    const GpuInfo& g = cuda.gpus[static_cast<size_t>(cuda_index)];
    f["device_name"] = g.name;
    f["device_uuid"] = g.uuid;
    f["compute_capability"] = g.compute_capability();
    f["sm_count"] = std::to_string(g.sm_count);
    f["memory_bytes"] = std::to_string(g.memory_bytes);
    f["clock_mhz"] = std::to_string(g.clock_mhz);
    f["memory_clock_mhz"] = std::to_string(g.memory_clock_mhz);
    f["memory_bus_width"] = std::to_string(g.memory_bus_width);
    std::string why_not;  // the card's links, as NVML reports them
    if (const auto links = query_gpu_links(g.pci_bus_id, why_not)) {
      f["pcie_link"] = links_text(*links);
      f["nvlinks_active"] = std::to_string(links->nvlinks_active);
    }
  } else {
    f["cuda_status"] = cuda.gpus.empty() ? cuda.status
                                         : "no GPU " + std::to_string(cuda_index) + " (" +
                                               cuda.status + ")";
  }
  return env;
}

}  // namespace xrun
