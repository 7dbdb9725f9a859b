// engine/device/device_info.h: what this machine has to train on: NVIDIA
// driver, CUDA runtime, cuDNN / cuBLAS / CUPTI versions (compiled against and
// loaded), each GPU, the CPU and oneDNN; and the Environment record stored
// with every run. Every query works on a machine with no GPU and no driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.h"

namespace xrun {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string uuid;         // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
  std::string pci_bus_id;   // "0000:01:00.0"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int clock_mhz = 0;         // peak SM clock
  int memory_clock_mhz = 0;  // peak memory clock
  int memory_bus_width = 0;  // bits
  // Precisions it can train in (fp32 always): see set_precisions().
  bool tf32 = false, fp16 = false, bf16 = false;
  bool fp16_tensor_cores = false;  // sm_70+
  // Whether the CUDA kernels in this build (CMAKE_CUDA_ARCHITECTURES, SASS and
  // PTX) can run on this GPU: its compute capability is at least the lowest
  // architecture built.
  bool kernels_supported = false;

  std::string compute_capability() const;  // "8.9"
  // "fp32", then "tf32", "fp16", "bf16" where supported.
  std::vector<std::string> train_precisions() const;
};

// Fills tf32/fp16/bf16/fp16_tensor_cores from cc_major/cc_minor: tf32 and
// bf16 need sm_80+, fp16 needs sm_53+ (tensor cores sm_70+).
void set_precisions(GpuInfo& gpu);

struct CudaInfo {
  bool compiled_with_cuda = false;
  int driver_version = 0;       // CUDA version the driver supports (13000 = 13.0); 0 = no driver
  std::string driver_release;   // driver release from NVML ("580.65.06"); empty without NVML
  int runtime_version = 0;      // cudart's version (13000 = 13.0)
  // A driver is present and can run this runtime: it supports the runtime's
  // CUDA version or a later one, or the same major version (CUDA's minor
  // version compatibility).
  bool driver_compatible = false;
  int device_count_error = 0;   // cudaGetDeviceCount's cudaError_t (0 = success)
  std::string status;           // "2 GPUs", "no CUDA device", "no NVIDIA driver found (...)"
  std::string cuda_architectures;  // the build's CMAKE_CUDA_ARCHITECTURES, "80,86,89,90"
  int cudnn_compiled = 0, cudnn_loaded = 0;            // CUDNN_VERSION form: 91900
  int cublas_compiled = 0, cublas_loaded = 0;          // major*10000+minor*100+patch: 130100
  int cupti_api_compiled = 0, cupti_api_loaded = 0;    // CUPTI_API_VERSION: 130001
  // The files those versions came from, as the dynamic loader resolved them
  // ("/usr/lib/x86_64-linux-gnu/libcudnn.so.9.19.0"; "" when not loaded): a
  // GPU machine's cuDNN may be a Python wheel's, older than the headers.
  std::string cudnn_library, cublas_library, cupti_library;
  std::vector<GpuInfo> gpus;
  // peer_access[i][j]: cudaDeviceCanAccessPeer(i, j) (1 or 0; -1 when the
  // call failed); empty with fewer than two GPUs or without CUDA.
  std::vector<std::vector<int>> peer_access;
};

// Never throws, never crashes without a driver (cudart, cuDNN, cuBLAS and
// CUPTI load libcuda lazily). In a build without CUDA, compiled_with_cuda is
// false and only driver_release (NVML) can be known.
CudaInfo query_cuda();

struct CpuInfo {
  std::string model;         // /proc/cpuinfo "model name"
  int logical_cores = 0;     // std::thread::hardware_concurrency()
  int physical_cores = 0;    // distinct (physical id, core id) pairs; best effort
  std::string onednn_version;  // "2.6.3"
  std::string onednn_isa;      // "avx512_core_bf16", the ISA oneDNN's kernels use
  std::string flags_summary;   // the flags that matter for training: "avx2 fma avx512f amx_bf16"
  // The bf16 kernels oneDNN would run here: "amx" (AMX tiles, ISA
  // avx512_core_amx), "avx512_bf16" (avx512_core_bf16, no AMX) or "" (none,
  // also where ONEDNN_MAX_CPU_ISA caps below them). On an AMX Xeon oneDNN's
  // bf16 convolutions ran 3-5x its fp32 ones at 224x224; with avx512_bf16
  // alone 0.6x (bench/README.md).
  std::string bf16_kernels;
  // What xrun's CPU engine trains in here: fp32, and bf16 where there are
  // bf16 kernels.
  std::vector<std::string> train_precisions() const {
    if (bf16_kernels.empty()) return {"fp32"};
    return {"fp32", "bf16"};
  }
};

// CpuInfo::bf16_kernels for oneDNN's effective ISA (its values are nested
// bit sets: avx512_core_amx contains avx512_core_bf16).
std::string bf16_kernels_for_isa(unsigned isa);

CpuInfo query_cpu();
// The CPUs this process may run on (sched_getaffinity), ascending; all of
// hardware_concurrency's when the call fails.
std::vector<int> usable_cpus();
// {0, 1, 2, 3, 8} -> "0-3,8", as taskset and /proc/self/status write it.
std::string cpu_list_text(const std::vector<int>& cpus);
std::string hostname();
// uname: "Linux 6.1.0-18-amd64 x86_64".
std::string os_description();
// /etc/os-release PRETTY_NAME, "" when absent.
std::string distro();
// The compiler this build of xrun came from: "GCC 14.2.0", "Clang 14.0.6".
std::string compiler_description();

// 13000 -> "13.0", 12040 -> "12.4" (cudaRuntimeGetVersion / cudaDriverGetVersion form).
std::string format_cuda_version(int version);
// The oldest driver branch that runs CUDA `cuda_version` (NVIDIA's minor
// version compatibility: any 12.x on 525 and newer, 13.x on 580 and newer);
// 0 for a version this table does not know (older than 12).
int minimum_driver_branch(int cuda_version);
// What a user whose driver cannot run this build must read: "this build
// needs driver >= 580 for CUDA 13.0; yours is 535.104.05, which runs CUDA
// 12.2: rebuild with CUDA 12.x (README, "On a GPU") or update the driver".
// "" when the driver runs it (or no driver answered: driver_version 0).
std::string driver_advice(int runtime_version, int driver_version, const std::string& driver_release);
// cuDNN: 91900 -> "9.19.0" (cuDNN 9+), 8907 -> "8.9.7" (cuDNN 8's major*1000 form).
std::string format_cudnn_version(int version);
// cuBLAS in the major*10000+minor*100+patch form: 130100 -> "13.1.0".
std::string format_cublas_version(int version);
// The NVIDIA driver release via NVML (dlopen'ed libnvidia-ml.so.1: no link
// dependency), "" when NVML is absent or fails.
std::string nvml_driver_release();

// The environment record stored with a run on `device` ("cpu", "cuda",
// "cuda:N"). Keys: host, cpu, cpu_cores, cpu_physical_cores, cpu_affinity
// (the CPUs the run may use, "0-3"), cuda_visible_devices (when set), onednn,
// onednn_isa, xrun_version, git_commit, os, distro, device, device_name; and
// for CUDA devices cuda_runtime, cudnn, cublas, cupti, driver (the NVML
// release, else the CUDA version the driver supports), driver_cuda, and when
// GPU N exists device_uuid, compute_capability, sm_count, memory_bytes,
// clock_mhz, memory_clock_mhz, memory_bus_width (else cuda_status says why
// not). For "cpu",
// device_name is the CPU model. Throws std::invalid_argument for another
// device string.
Environment collect_environment(const std::string& device);

}  // namespace xrun
