// tests/device/interconnect_test.cpp: what `xrun doctor` makes of the
// interconnect facts (engine/device/interconnect.h), on topologies built
// here: the path an all-reduce between the GPUs takes (an RTX 4090 D pair
// through host memory, an NVLink pair GPU to GPU, PCIe peer to peer, unknown
// without CUDA) and each card's link line; NVML itself needs a driver.
#include "catch2_compat.h"

#include "engine/device/interconnect.h"

using namespace xrun;
using Catch::Contains;

namespace {

GpuLinks card(int index, const std::string& name, int nvlinks, int version, int gen, int width) {
  GpuLinks g;
  g.index = index;
  g.name = name;
  g.nvlinks_active = nvlinks;
  g.nvlink_version = version;
  g.pcie_gen = g.pcie_gen_max = gen;
  g.pcie_width = g.pcie_width_max = width;
  return g;
}

Interconnect pair(const GpuLinks& a, const GpuLinks& b, int peer) {
  Interconnect ic;
  ic.gpus = {a, b};
  ic.peer = {{-1, peer}, {peer, -1}};
  return ic;
}

}  // namespace

TEST_CASE("interconnect: the all-reduce path between GPUs", "[device][interconnect]") {
  CHECK(allreduce_path(Interconnect{}) == "no GPU");
  Interconnect one;
  one.gpus = {card(0, "NVIDIA H200", 18, 4, 5, 16)};
  CHECK(allreduce_path(one) == "one GPU: nothing to connect");

  // Two RTX 4090 D: no NVLink, and the driver grants no peer access.
  const GpuLinks d0 = card(0, "NVIDIA GeForce RTX 4090 D", 0, 0, 4, 16);
  const GpuLinks d1 = card(1, "NVIDIA GeForce RTX 4090 D", 0, 0, 4, 16);
  CHECK_THAT(allreduce_path(pair(d0, d1, 0)),
             Contains("through host memory between GPUs 0-1") && Contains("no peer access"));
  // Two A100 joined by NVLink 3.
  const GpuLinks a0 = card(0, "NVIDIA A100-SXM4-80GB", 12, 3, 4, 16);
  const GpuLinks a1 = card(1, "NVIDIA A100-SXM4-80GB", 12, 3, 4, 16);
  CHECK(allreduce_path(pair(a0, a1, 1)) == "NVLink, GPU to GPU");
  // Peer access over PCIe, no NVLink (two A40 without their bridge).
  const GpuLinks r0 = card(0, "NVIDIA A40", 0, 0, 4, 16);
  CHECK_THAT(allreduce_path(pair(r0, r0, 1)), Contains("PCIe peer to peer"));
  // A build without CUDA cannot ask.
  CHECK_THAT(allreduce_path(pair(d0, d1, -1)), Contains("not known"));
  // Three cards, one pair without access.
  Interconnect three;
  three.gpus = {r0, r0, r0};
  three.peer = {{-1, 1, 0}, {1, -1, 1}, {0, 1, -1}};
  CHECK_THAT(allreduce_path(three), Contains("partly through host memory between GPUs 0-2"));
}

TEST_CASE("interconnect: a card's links as doctor prints and the JSON holds them",
          "[device][interconnect]") {
  GpuLinks slow = card(0, "NVIDIA GeForce RTX 4090 D", 0, 0, 4, 16);
  slow.pcie_width = 8;  // a card in a x16 slot running at x8
  CHECK(links_text(slow) == "PCIe gen 4 x8 (card max gen 4 x16); no NVLink");
  CHECK(links_text(card(1, "NVIDIA H100 80GB HBM3", 18, 4, 5, 16)) ==
        "PCIe gen 5 x16 (card max gen 5 x16); 18 NVLink link(s) active, NVLink 4");
  GpuLinks unknown;
  CHECK(links_text(unknown) == "PCIe gen ? x? (card max gen ? x?); no NVLink");
  const nlohmann::json j = interconnect_json(pair(slow, slow, 0));
  CHECK(j.at("nvml").is_null());
  CHECK(j.at("gpus").size() == 2);
  CHECK(j.at("gpus")[0].at("pcie").at("width") == 8);
  CHECK(j.at("gpus")[0].at("pcie").at("width_max") == 16);
  CHECK(j.at("peer_access")[0][1] == 0);
  CHECK_THAT(j.at("allreduce_path").get<std::string>(), Contains("through host memory"));
}
