// engine/device/cuda_query.cpp: query_cuda() for builds with the CUDA
// toolkit: driver and runtime versions, cuDNN / cuBLAS / CUPTI versions
// (compiled against and loaded), and every GPU's properties. Plain C++ over
// the runtime API; safe with no driver, where cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver and everything else still answers.
#include <cublas_v2.h>  // not <cublas_api.h> alone: CUDA 12's refuses that
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "profiler/cupti_api.h"
#include "engine/device/device_info.h"

#ifndef XRUN_CUDA_ARCHITECTURES
#define XRUN_CUDA_ARCHITECTURES ""
#endif

namespace xrun {
namespace {

std::string format_uuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

// Lowest architecture in the build's list ("80,86,89,90" or "80-real,90"),
// 0 when unknown ("native", "all").
int lowest_architecture(const std::string& list) {
  int lowest = 0;
  std::string item;
  std::stringstream ss(list);
  while (std::getline(ss, item, ',')) {
    int arch = std::atoi(item.c_str());
    if (arch > 0 && (lowest == 0 || arch < lowest)) lowest = arch;
  }
  return lowest;
}

int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return value;
}

std::string describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

// The file the function at `f` was loaded from, symbolic links resolved
// ("" when unknown).
std::string library_file(const void* f) {
  Dl_info info{};
  if (!f || !dladdr(f, &info) || !info.dli_fname) return "";
  char* real = realpath(info.dli_fname, nullptr);
  const std::string path = real ? real : info.dli_fname;
  std::free(real);
  return path;
}

}  // namespace

CudaInfo query_cuda() {
  CudaInfo info;
  info.compiled_with_cuda = true;
  info.cuda_architectures = XRUN_CUDA_ARCHITECTURES;
  info.driver_release = nvml_driver_release();

  if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess) info.driver_version = 0;
  if (cudaRuntimeGetVersion(&info.runtime_version) != cudaSuccess) info.runtime_version = 0;
  info.driver_compatible =
      info.driver_version > 0 && (info.driver_version >= info.runtime_version ||
                                  info.driver_version / 1000 == info.runtime_version / 1000);

  // Library versions: none of these calls needs a driver or a handle.
  info.cudnn_compiled = CUDNN_VERSION;
  info.cudnn_loaded = static_cast<int>(cudnnGetVersion());
  info.cublas_compiled = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    info.cublas_loaded = major * 10000 + minor * 100 + patch;
  info.cupti_api_compiled = CUPTI_API_VERSION;
  uint32_t cupti = 0;  // CUPTI is loaded at run time: it may be absent (tracing is then off)
  if (const profiler::CuptiApi* api = profiler::cupti_api()) {
    if (api->get_version(&cupti) == CUPTI_SUCCESS) info.cupti_api_loaded = static_cast<int>(cupti);
    info.cupti_library = library_file(reinterpret_cast<const void*>(api->get_version));
  }
  // By name, not by address: the address of a function the executable
  // calls can be a stub inside the executable itself.
  info.cudnn_library = library_file(dlsym(RTLD_DEFAULT, "cudnnGetVersion"));
  info.cublas_library = library_file(dlsym(RTLD_DEFAULT, "cublasGetProperty"));

  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  info.device_count_error = static_cast<int>(err);
  if (err != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next CUDA call
    count = 0;
    const std::string why = "cudaGetDeviceCount: " + describe(err);
    if (err == cudaErrorInsufficientDriver && info.driver_version == 0)
      info.status = "no NVIDIA driver found (" + why + ")";
    else if (err == cudaErrorInsufficientDriver)
      info.status = "the NVIDIA driver supports CUDA " + format_cuda_version(info.driver_version) +
                    ", older than this build's CUDA runtime " +
                    format_cuda_version(info.runtime_version) + "; update the driver (" + why + ")";
    else if (err == cudaErrorNoDevice)
      info.status = "no CUDA device (" + why + ")";
    else if (err == cudaErrorStubLibrary)
      info.status = "only the CUDA driver stub library was found, not a real driver (" + why + ")";
    else
      info.status = "CUDA is unavailable (" + why + ")";
    return info;
  }

  const int lowest_arch = lowest_architecture(info.cuda_architectures);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    cudaError_t perr = cudaGetDeviceProperties(&p, i);
    if (perr != cudaSuccess) {
      cudaGetLastError();
      GpuInfo g;
      g.index = i;
      g.name = "unreadable GPU (cudaGetDeviceProperties: " + describe(perr) + ")";
      info.gpus.push_back(g);
      continue;
    }
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.uuid = format_uuid(p.uuid);
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    else cudaGetLastError();
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
    g.memory_bus_width = p.memoryBusWidth;
    // CUDA 13 dropped the clock fields from cudaDeviceProp; attributes are in kHz.
    g.clock_mhz = attribute(cudaDevAttrClockRate, i) / 1000;
    g.memory_clock_mhz = attribute(cudaDevAttrMemoryClockRate, i) / 1000;
    set_precisions(g);
    g.kernels_supported = lowest_arch == 0 || g.cc_major * 10 + g.cc_minor >= lowest_arch;
    info.gpus.push_back(std::move(g));
  }
  if (info.gpus.size() >= 2) {
    const size_t n = info.gpus.size();
    info.peer_access.assign(n, std::vector<int>(n, -1));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        int can = 0;
        if (i == j) continue;
        if (cudaDeviceCanAccessPeer(&can, info.gpus[i].index, info.gpus[j].index) == cudaSuccess)
          info.peer_access[i][j] = can ? 1 : 0;
        else
          cudaGetLastError();
      }
  }
  if (count == 0) info.status = "no CUDA device";
  else info.status = std::to_string(count) + (count == 1 ? " GPU" : " GPUs");
  return info;
}

}  // namespace xrun
