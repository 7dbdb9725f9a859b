// engine/device/doctor.cpp: `xrun doctor`: gathers query_cuda() and
// query_cpu() and prints them for a person (text) or a program (JSON), then
// answers whether the required device is usable.
#include "engine/device/doctor.h"
#include "engine/device/nccl_api.h"


#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device/device_info.h"
#include "engine/device/gpu_peaks.h"
#include "engine/device/interconnect.h"
#include "xrun_version.h"

namespace xrun {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// "9.19.0" or "9.19.0 (built with 9.10.2: the versions differ)".
std::string loaded_vs_compiled(const std::string& loaded, const std::string& compiled) {
  if (loaded.empty()) return "not loaded (built with " + compiled + ")";
  if (loaded == compiled) return loaded;
  return loaded + " (built with " + compiled + ": the versions differ)";
}

// ", from FILE" for a library's line, "" when the file is unknown.
std::string from(const std::string& file) { return file.empty() ? "" : ", from " + file; }

// Why "cuda" cannot be used, or "" when a GPU is usable.
std::string cuda_unusable_reason(const CudaInfo& cuda) {
  if (!cuda.compiled_with_cuda) return cuda.status;
  if (cuda.gpus.empty()) return cuda.status;
  for (const auto& g : cuda.gpus)
    if (g.kernels_supported) return "";
  const GpuInfo& g = cuda.gpus.front();
  return "GPU " + std::to_string(g.index) + " (" + g.name + ", compute capability " +
         g.compute_capability() + ") is older than the architectures this build targets (" +
         cuda.cuda_architectures + ")";
}

// The card's peak per precision it trains in, and its memory bandwidth
// (engine/device/gpu_peaks.h): {"fp32": {"flops", "source", "estimated"},
// ..., "bandwidth": {"bytes_per_s", "source"}}; 0 where not known.
nlohmann::json peaks_json(const GpuInfo& g) {
  nlohmann::json j = nlohmann::json::object();
  const GpuSpec spec = gpu_spec(g);
  GpuPeak last;
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16}) {
    last = gpu_peak(spec, p);
    j[to_string(p)] = {{"flops", last.flops}, {"source", last.flops_source},
                       {"estimated", last.estimated}};
  }
  j["bandwidth"] = {{"bytes_per_s", last.bytes_per_s}, {"source", last.bandwidth_source}};
  return j;
}

// "fp32 82.6, tf32 82.6, bf16 165.2 TFLOP/s dense (...); 1008 GB/s".
std::string peaks_text(const GpuInfo& g) {
  const GpuSpec spec = gpu_spec(g);
  std::ostringstream o;
  std::string source;
  bool any = false;
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16}) {
    const GpuPeak peak = gpu_peak(spec, p);
    if (!(peak.flops > 0)) continue;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", peak.flops / 1e12);
    o << (any ? ", " : "") << to_string(p) << " " << buf;
    any = true;
    if (source.empty())
      source = peak.estimated ? "estimated from SM count and clock"
                              : "published, " + std::string(find_published_gpu_peak(g.name)->product);
  }
  if (any) o << " TFLOP/s dense (" << source << ")";
  else o << "- (" << gpu_peak(spec, Precision::fp32).flops_source << ")";
  const GpuPeak bw = gpu_peak(spec, Precision::fp32);
  if (bw.bytes_per_s > 0) o << "; memory " << static_cast<long long>(bw.bytes_per_s / 1e9 + 0.5) << " GB/s";
  return o.str();
}

nlohmann::json to_json(const CudaInfo& cuda, const CpuInfo& cpu) {
  using nlohmann::json;
  json gpus = json::array();
  for (const auto& g : cuda.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"uuid", g.uuid},
                    {"pci_bus_id", g.pci_bus_id},
                    {"compute_capability", g.compute_capability()},
                    {"cc_major", g.cc_major},
                    {"cc_minor", g.cc_minor},
                    {"sm_count", g.sm_count},
                    {"memory_bytes", g.memory_bytes},
                    {"clock_mhz", g.clock_mhz},
                    {"memory_clock_mhz", g.memory_clock_mhz},
                    {"memory_bus_width", g.memory_bus_width},
                    {"precisions", g.train_precisions()},
                    {"fp16_tensor_cores", g.fp16_tensor_cores},
                    {"kernels_supported", g.kernels_supported},
                    {"peaks", peaks_json(g)}});
  }
  auto lib = [](int compiled, int loaded, const std::string& compiled_s, const std::string& loaded_s,
                const std::string& file) {
    return json{{"compiled", compiled}, {"loaded", loaded}, {"compiled_version", compiled_s},
                {"loaded_version", loaded_s}, {"library", file}};
  };
  json j;
  j["xrun"] = {{"version", XRUN_VERSION},
               {"git_commit", XRUN_GIT_COMMIT},
               {"compiler", compiler_description()}};
  j["host"] = hostname();
  j["os"] = os_description();
  j["distro"] = distro();
  j["cuda"] = {{"compiled_with_cuda", cuda.compiled_with_cuda},
               {"status", cuda.status},
               {"driver_release", cuda.driver_release},
               {"driver_version", cuda.driver_version},
               {"driver_cuda", format_cuda_version(cuda.driver_version)},
               {"runtime_version", cuda.runtime_version},
               {"runtime", format_cuda_version(cuda.runtime_version)},
               {"driver_compatible", cuda.driver_compatible},
               {"driver_advice", driver_advice(cuda.runtime_version, cuda.driver_version,
                                               cuda.driver_release)},
               {"device_count_error", cuda.device_count_error},
               {"architectures", cuda.cuda_architectures},
               {"cudnn", lib(cuda.cudnn_compiled, cuda.cudnn_loaded, format_cudnn_version(cuda.cudnn_compiled),
                             format_cudnn_version(cuda.cudnn_loaded), cuda.cudnn_library)},
               {"cublas", lib(cuda.cublas_compiled, cuda.cublas_loaded,
                              format_cublas_version(cuda.cublas_compiled),
                              format_cublas_version(cuda.cublas_loaded), cuda.cublas_library)},
               {"cupti_api", lib(cuda.cupti_api_compiled, cuda.cupti_api_loaded,
                                 std::to_string(cuda.cupti_api_compiled),
                                 std::to_string(cuda.cupti_api_loaded), cuda.cupti_library)}};
  bool nccl_ok = false;
  const std::string nccl = nccl_library(&nccl_ok);
  j["cuda"]["nccl"] = {{"loaded", nccl_ok}, {nccl_ok ? "library" : "why_not", nccl}};
  j["gpus"] = std::move(gpus);
  j["interconnect"] = interconnect_json(query_interconnect(cuda));
  j["cpu"] = {{"model", cpu.model},
              {"logical_cores", cpu.logical_cores},
              {"physical_cores", cpu.physical_cores},
              {"flags", cpu.flags_summary},
              {"onednn_version", cpu.onednn_version},
              {"onednn_isa", cpu.onednn_isa},
              {"bf16_kernels", cpu.bf16_kernels},
              {"train_precisions", cpu.train_precisions()}};
  return j;
}

void print_text(std::ostream& out, const CudaInfo& cuda, const CpuInfo& cpu,
                const std::string& unusable) {
  out << "xrun " << XRUN_VERSION << " (commit " << XRUN_GIT_COMMIT << ", "
      << compiler_description() << ")\n";
  out << "Host:           " << hostname() << ", " << os_description();
  if (std::string d = distro(); !d.empty()) out << ", " << d;
  out << "\n\n";

  if (!cuda.compiled_with_cuda) {
    out << "CUDA:           " << cuda.status << "\n";
  } else {
    out << "NVIDIA driver:  ";
    if (cuda.driver_version == 0 && cuda.driver_release.empty())
      out << "not found\n";
    else
      out << (cuda.driver_release.empty() ? std::string("release unknown (no NVML)") : cuda.driver_release)
          << ", supports CUDA " << format_cuda_version(cuda.driver_version) << "\n";
    out << "CUDA runtime:   " << format_cuda_version(cuda.runtime_version);
    if (cuda.driver_version == 0)
      out << " (no driver to run it)\n";
    else if (cuda.driver_compatible)
      out << " (compatible with the driver)\n";
    else
      out << " (NOT compatible: "
          << driver_advice(cuda.runtime_version, cuda.driver_version, cuda.driver_release) << ")\n";
    out << "cuDNN:          "
        << loaded_vs_compiled(format_cudnn_version(cuda.cudnn_loaded), format_cudnn_version(cuda.cudnn_compiled))
        << from(cuda.cudnn_library) << "\n";
    out << "cuBLAS:         "
        << loaded_vs_compiled(format_cublas_version(cuda.cublas_loaded),
                              format_cublas_version(cuda.cublas_compiled))
        << from(cuda.cublas_library) << "\n";
    out << "CUPTI API:      "
        << loaded_vs_compiled(cuda.cupti_api_loaded > 0 ? std::to_string(cuda.cupti_api_loaded) : "",
                              std::to_string(cuda.cupti_api_compiled))
        << from(cuda.cupti_library) << "\n";
    bool nccl_ok = false;
    const std::string nccl = nccl_library(&nccl_ok);
    out << "NCCL:           " << (nccl_ok ? nccl : "not available: " + nccl)
        << "\n";
    out << "CUDA kernels:   built for " << (cuda.cuda_architectures.empty() ? "?" : cuda.cuda_architectures)
        << "\n";
  }
  out << "\n";

  for (const auto& g : cuda.gpus) {
    out << "GPU " << g.index << ": " << g.name << "\n";
    out << "  UUID:               " << g.uuid;
    if (!g.pci_bus_id.empty()) out << " (PCI " << g.pci_bus_id << ")";
    out << "\n";
    out << "  Compute capability: " << g.compute_capability() << ", " << g.sm_count << " SMs, "
        << g.clock_mhz << " MHz\n";
    out << "  Memory:             " << gib(g.memory_bytes) << ", " << g.memory_bus_width << "-bit, "
        << g.memory_clock_mhz << " MHz\n";
    out << "  Peaks:              " << peaks_text(g) << "\n";
    out << "  Trains in:          " << join(g.train_precisions(), ", ");
    if (g.fp16 && !g.fp16_tensor_cores) out << " (fp16 without tensor cores)";
    out << "\n";
    if (!g.kernels_supported)
      out << "  Not usable:         older than the architectures this build targets ("
          << cuda.cuda_architectures << ")\n";
  }
  if (!cuda.gpus.empty()) {
    const Interconnect ic = query_interconnect(cuda);
    out << "Interconnect:       " << allreduce_path(ic) << "\n";
    if (!ic.nvml.empty()) out << "  " << ic.nvml << "\n";
    else
      for (const GpuLinks& g : ic.gpus) out << "  GPU " << g.index << ":             " << links_text(g) << "\n";
    for (size_t i = 0; i < ic.peer.size(); ++i)
      for (size_t k = 0; k < ic.peer.size(); ++k)
        if (i != k)
          out << "  Peer access " << i << " -> " << k << ":  "
              << (ic.peer[i][k] == 1 ? "yes" : ic.peer[i][k] == 0 ? "no" : "unknown") << "\n";
  }
  if (cuda.gpus.empty())
    out << "No NVIDIA GPU: " << cuda.status << ". xrun will train on the CPU.\n\n";
  else if (!unusable.empty())
    out << "No usable NVIDIA GPU: " << unusable << ". xrun will train on the CPU.\n\n";
  else
    out << "\n";

  out << "CPU:            " << cpu.model << " (" << cpu.logical_cores << " logical cores, "
      << cpu.physical_cores << " physical)\n";
  out << "  Flags:        " << cpu.flags_summary << "\n";
  out << "oneDNN:         " << cpu.onednn_version << ", ISA " << cpu.onednn_isa << "\n";
  out << "  Trains in:    " << join(cpu.train_precisions(), ", ")
      << (cpu.bf16_kernels == "amx"           ? " (bf16 on AMX)"
          : cpu.bf16_kernels == "avx512_bf16" ? " (bf16 on AVX512_BF16 without AMX: slower than fp32)"
                                              : " (no bf16 kernels here: bf16 needs AVX512_BF16 or AMX)")
      << "\n";
}

}  // namespace

int run_doctor(std::ostream& out, std::ostream& err, bool json, const std::string& require) {
  if (!require.empty() && require != "cpu" && require != "cuda") {
    // A usage error: said on standard error, never mixed into the report.
    err << "xrun: doctor --require " << require << ": unknown device (expected cpu or cuda)\n";
    return 2;
  }
  const CudaInfo cuda = query_cuda();
  const CpuInfo cpu = query_cpu();
  const std::string unusable = cuda_unusable_reason(cuda);
  const bool cuda_ok = unusable.empty();
  const int rc = require == "cuda" && !cuda_ok ? 1 : 0;

  if (json) {
    nlohmann::json j = to_json(cuda, cpu);
    j["train_device"] = cuda_ok ? "cuda" : "cpu";
    j["require"] = require;
    j["ok"] = rc == 0;
    if (rc != 0) j["error"] = "CUDA was required but is not usable: " + unusable;
    out << j.dump(2) << "\n";
    return rc;
  }
  print_text(out, cuda, cpu, unusable);
  if (!require.empty()) {
    out << "\n";
    if (rc != 0) err << "xrun: required device cuda is not usable: " << unusable << "\n";
    else out << "Required device " << require << " is available.\n";
  }
  return rc;
}

}  // namespace xrun
