// engine/device/interconnect.h: how this machine's GPUs are connected, as
// `nvidia-smi topo -m` would tell: each card's NVLink links (active, and
// their version) and PCIe link (generation and width, current and the
// card's maximum) from NVML, loaded at run time (no driver, no NVML: said
// so), and for each pair of GPUs whether one can access the other's memory
// directly (cudaDeviceCanAccessPeer, in CudaInfo::peer_access). From those
// facts, the path a multi-GPU all-reduce would take between them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device/device_info.h"

namespace xrun {

struct GpuLinks {
  int index = 0;           // CUDA's
  std::string name;
  int nvlinks_active = 0;  // links whose state is active
  int nvlink_version = 0;  // of the first active link; 0 with none
  int pcie_gen = 0, pcie_gen_max = 0, pcie_width = 0, pcie_width_max = 0;  // 0 = unknown
};

struct Interconnect {
  std::string nvml;  // "" when NVML answered; else why it could not
  std::vector<GpuLinks> gpus;
  // peer[i][j] (i != j): 1 GPU i can access GPU j's memory, 0 it cannot,
  // -1 not known (a build without CUDA). Empty with fewer than two GPUs.
  std::vector<std::vector<int>> peer;
};

// NVML's answers for the GPU at `pci_bus_id` (as cudaDeviceGetPCIBusId
// writes it); nullopt with `why_not` when NVML is missing or does not know it.
std::optional<GpuLinks> query_gpu_links(const std::string& pci_bus_id, std::string& why_not);

// Every GPU in `cuda` (NVML per card, peer access from cuda.peer_access).
Interconnect query_interconnect(const CudaInfo& cuda);

// "PCIe gen 4 x16 (card max gen 4 x16); no NVLink".
std::string links_text(const GpuLinks& g);
// What an all-reduce between these GPUs goes through: "one GPU: nothing to
// connect", "NVLink between every pair", "through host memory: no NVLink and
// no peer access between ...", ...
std::string allreduce_path(const Interconnect& ic);

nlohmann::json interconnect_json(const Interconnect& ic);

}  // namespace xrun
