// engine/device/interconnect.cpp: see interconnect.h. NVML is declared here
// by hand (its C ABI: status 0 = NVML_SUCCESS, opaque device handles) and
// loaded with dlopen, as nvml_driver_release does.
#include "engine/device/interconnect.h"

#include <dlfcn.h>

namespace xrun {

namespace {

// The NVML entry points used here, resolved from libnvidia-ml.so.1.
struct Nvml {
  using Handle = void*;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_bus_id)(const char*, Handle*) = nullptr;
  int (*link_state)(Handle, unsigned, int*) = nullptr;      // nvmlEnableState_t: 1 = enabled
  int (*link_version)(Handle, unsigned, unsigned*) = nullptr;
  int (*pcie_gen)(Handle, unsigned*) = nullptr;
  int (*pcie_gen_max)(Handle, unsigned*) = nullptr;
  int (*pcie_width)(Handle, unsigned*) = nullptr;
  int (*pcie_width_max)(Handle, unsigned*) = nullptr;
  void* lib = nullptr;
  std::string why_not;

  Nvml() {
    lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why_not = "NVML not loaded (libnvidia-ml.so.1 comes with the NVIDIA driver)";
      return;
    }
    const auto sym = [this](const char* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      return fn != nullptr;
    };
    const bool all = sym("nvmlInit_v2", init) && sym("nvmlShutdown", shutdown) &&
                     sym("nvmlDeviceGetHandleByPciBusId_v2", by_bus_id) &&
                     sym("nvmlDeviceGetNvLinkState", link_state) &&
                     sym("nvmlDeviceGetNvLinkVersion", link_version) &&
                     sym("nvmlDeviceGetCurrPcieLinkGeneration", pcie_gen) &&
                     sym("nvmlDeviceGetMaxPcieLinkGeneration", pcie_gen_max) &&
                     sym("nvmlDeviceGetCurrPcieLinkWidth", pcie_width) &&
                     sym("nvmlDeviceGetMaxPcieLinkWidth", pcie_width_max);
    if (!all) {
      why_not = "NVML lacks a function xrun needs (a driver older than NVML's v2 API)";
    } else if (init() != 0) {
      why_not = "NVML did not start (nvmlInit failed: no NVIDIA driver running?)";
      init = nullptr;
    }
  }
  ~Nvml() {
    if (init && why_not.empty()) shutdown();
    if (lib) ::dlclose(lib);
  }
  bool ok() const { return why_not.empty(); }
};

std::optional<GpuLinks> links_of(const Nvml& nvml, const std::string& bus, std::string& why_not) {
  if (!nvml.ok()) {
    why_not = nvml.why_not;
    return std::nullopt;
  }
  Nvml::Handle h = nullptr;
  if (bus.empty() || nvml.by_bus_id(bus.c_str(), &h) != 0) {
    why_not = "NVML does not know the GPU at PCI " + (bus.empty() ? "?" : bus);
    return std::nullopt;
  }
  GpuLinks g;
  // NVML_NVLINK_MAX_LINKS is 18 (Hopper); a link past the card's last is an error.
  for (unsigned link = 0; link < 18; ++link) {
    int state = 0;
    if (nvml.link_state(h, link, &state) != 0) break;
    if (state != 1) continue;
    ++g.nvlinks_active;
    unsigned version = 0;
    if (g.nvlink_version == 0 && nvml.link_version(h, link, &version) == 0)
      g.nvlink_version = static_cast<int>(version);
  }
  unsigned v = 0;
  if (nvml.pcie_gen(h, &v) == 0) g.pcie_gen = static_cast<int>(v);
  if (nvml.pcie_gen_max(h, &v) == 0) g.pcie_gen_max = static_cast<int>(v);
  if (nvml.pcie_width(h, &v) == 0) g.pcie_width = static_cast<int>(v);
  if (nvml.pcie_width_max(h, &v) == 0) g.pcie_width_max = static_cast<int>(v);
  return g;
}

std::string gen_width(int gen, int width) {
  return "gen " + (gen > 0 ? std::to_string(gen) : std::string("?")) + " x" +
         (width > 0 ? std::to_string(width) : std::string("?"));
}

}  // namespace

std::optional<GpuLinks> query_gpu_links(const std::string& pci_bus_id, std::string& why_not) {
  const Nvml nvml;
  return links_of(nvml, pci_bus_id, why_not);
}

Interconnect query_interconnect(const CudaInfo& cuda) {
  Interconnect ic;
  const Nvml nvml;
  for (const GpuInfo& gpu : cuda.gpus) {
    std::string why;
    GpuLinks g = links_of(nvml, gpu.pci_bus_id, why).value_or(GpuLinks{});
    if (!why.empty() && ic.nvml.empty()) ic.nvml = why;
    g.index = gpu.index;
    g.name = gpu.name;
    ic.gpus.push_back(std::move(g));
  }
  if (cuda.gpus.empty() && !nvml.ok()) ic.nvml = nvml.why_not;
  if (cuda.gpus.size() >= 2) {
    const size_t n = cuda.gpus.size();
    ic.peer.assign(n, std::vector<int>(n, -1));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (i != j && i < cuda.peer_access.size() && j < cuda.peer_access[i].size())
          ic.peer[i][j] = cuda.peer_access[i][j];
  }
  return ic;
}

std::string links_text(const GpuLinks& g) {
  std::string out = "PCIe " + gen_width(g.pcie_gen, g.pcie_width) + " (card max " +
                    gen_width(g.pcie_gen_max, g.pcie_width_max) + "); ";
  if (g.nvlinks_active == 0) return out + "no NVLink";
  return out + std::to_string(g.nvlinks_active) + " NVLink link(s) active" +
         (g.nvlink_version > 0 ? ", NVLink " + std::to_string(g.nvlink_version) : "");
}

std::string allreduce_path(const Interconnect& ic) {
  if (ic.gpus.empty()) return "no GPU";
  if (ic.gpus.size() == 1) return "one GPU: nothing to connect";
  bool all_nvlink = true, any_peer = false, unknown = false;
  std::vector<std::string> without;
  for (const GpuLinks& g : ic.gpus) all_nvlink = all_nvlink && g.nvlinks_active > 0;
  for (size_t i = 0; i < ic.peer.size(); ++i)
    for (size_t j = i + 1; j < ic.peer.size(); ++j) {
      if (ic.peer[i][j] < 0 || ic.peer[j][i] < 0) unknown = true;
      if (ic.peer[i][j] == 1 && ic.peer[j][i] == 1)
        any_peer = true;
      else
        without.push_back(std::to_string(i) + "-" + std::to_string(j));
    }
  if (unknown) return "not known (peer access needs the CUDA engine)";
  if (all_nvlink && without.empty()) return "NVLink, GPU to GPU";
  if (without.empty()) return "PCIe peer to peer, GPU to GPU (no NVLink on every card)";
  std::string pairs;
  for (const std::string& p : without) pairs += (pairs.empty() ? "" : ", ") + p;
  return std::string(any_peer ? "partly " : "") +
         "through host memory between GPUs " + pairs +
         ": no peer access there (GeForce cards since Ada have none), so NCCL copies each "
         "chunk through pinned host buffers over PCIe";
}

nlohmann::json interconnect_json(const Interconnect& ic) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuLinks& g : ic.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"nvlinks_active", g.nvlinks_active},
                    {"nvlink_version", g.nvlink_version},
                    {"pcie", {{"gen", g.pcie_gen}, {"gen_max", g.pcie_gen_max},
                              {"width", g.pcie_width}, {"width_max", g.pcie_width_max}}}});
  return {{"nvml", ic.nvml.empty() ? nlohmann::json(nullptr) : nlohmann::json(ic.nvml)},
          {"gpus", gpus},
          {"peer_access", ic.peer},
          {"allreduce_path", allreduce_path(ic)}};
}

}  // namespace xrun
