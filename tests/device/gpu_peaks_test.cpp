// tests/device/gpu_peaks_test.cpp: the GPU peak table's arithmetic: every
// published row agrees with its architecture's per-SM rate (so none holds a
// 2:4-sparsity figure or a typo), driver names find the right row, scaling by
// the driver's SM count and clock (the RTX 4090 D), the estimate for cards
// missing from the table, and the bandwidth from memory clock and bus width
// against the published figures.
#include "catch2_compat.h"

#include "engine/device/gpu_peaks.h"

using namespace xrun;
using Catch::Contains;

namespace {

GpuSpec card(const std::string& name, int major, int minor, int sms, int mhz, int mem_mhz = 0,
             int bus = 0) {
  GpuSpec g;
  g.name = name;
  g.cc_major = major;
  g.cc_minor = minor;
  g.sm_count = sms;
  g.clock_mhz = mhz;
  g.memory_clock_mhz = mem_mhz;
  g.memory_bus_width = bus;
  return g;
}

const Precision kAll[] = {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16};

}  // namespace

TEST_CASE("GPU peaks: each published row agrees with its architecture's FLOPs per SM per clock",
          "[device][peaks]") {
  for (const PublishedGpuPeak& row : published_gpu_peaks()) {
    for (const Precision p : kAll) {
      GpuSpec g = card(row.product, row.cc / 10, row.cc % 10, row.sm_count, row.clock_mhz);
      const double published = gpu_peak(g, p).flops;
      const double rate = gpu_flops_per_sm_clock(row.cc, p, row.half_rate);
      INFO(row.product << " " << to_string(p) << ": published " << published / 1e12
                       << " TFLOP/s, rate " << rate);
      if (published == 0) {
        // No such math on the product: its architecture has none either, or
        // (fp16 before tensor cores) xrun states no figure.
        CHECK((rate == 0 || p == Precision::tf32 || p == Precision::bf16));
        continue;
      }
      REQUIRE(rate > 0);
      // Within 20%: vendors state tensor figures at a clock below the
      // driver's maximum (H100 SXM: 1830 against 1980 MHz, 8%; the NVL
      // parts 13%), but a sparsity figure (2x) or a decimal slip fails.
      const double from_rate = rate * row.sm_count * row.clock_mhz * 1e6;
      CHECK(published / from_rate > 0.8);
      CHECK(published / from_rate < 1.2);
    }
  }
}

TEST_CASE("GPU peaks: driver names find their product's row, the longest match first",
          "[device][peaks]") {
  const auto product = [](const std::string& name) -> std::string {
    const PublishedGpuPeak* row = find_published_gpu_peak(name);
    return row ? row->product : "";
  };
  CHECK(product("NVIDIA GeForce RTX 4090") == "RTX 4090");
  CHECK(product("NVIDIA GeForce RTX 4090 D") == "RTX 4090");  // scaled by SM count below
  CHECK(product("NVIDIA GeForce RTX 3090 Ti") == "RTX 3090 Ti");
  CHECK(product("NVIDIA GeForce RTX 3090") == "RTX 3090");
  CHECK(product("NVIDIA H100 80GB HBM3") == "H100");
  CHECK(product("NVIDIA H100 PCIe") == "H100 PCIe");
  CHECK(product("NVIDIA H100 NVL") == "H100 NVL");
  CHECK(product("NVIDIA H200") == "H200");
  CHECK(product("NVIDIA A100-SXM4-80GB") == "A100");
  CHECK(product("NVIDIA A100 80GB PCIe") == "A100");
  CHECK(product("Tesla V100-SXM2-16GB") == "V100-SXM2");
  CHECK(product("Tesla T4") == "T4");
  CHECK(product("NVIDIA L40S") == "L40S");
  CHECK(product("NVIDIA L40") == "L40");
  // Whole words only: an A4000 is no A40, an A10G no A10, a 4090 no 4090 Ti.
  CHECK(product("NVIDIA RTX A4000") == "");
  CHECK(product("NVIDIA A10G") == "");
  CHECK(product("NVIDIA GeForce RTX 4070 Ti") == "");
}

TEST_CASE("GPU peaks: a listed card as its driver reports it gets the published dense figure",
          "[device][peaks]") {
  const GpuSpec rtx4090 = card("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520, 10501, 384);
  const GpuPeak bf16 = gpu_peak(rtx4090, Precision::bf16);
  CHECK(bf16.flops == Approx(165.2e12));
  CHECK_FALSE(bf16.estimated);
  CHECK_THAT(bf16.flops_source, Contains("Ada Lovelace") && Contains("RTX 4090") &&
                                    Contains("bf16 tensor with fp32 accumulate") &&
                                    Contains("dense 165.2 TFLOP/s"));
  CHECK_THAT(bf16.flops_source, !Contains("scaled"));
  CHECK(gpu_peak(rtx4090, Precision::fp32).flops == Approx(82.6e12));
  // GeForce: fp16/bf16 tensor math with fp32 accumulate at half the
  // datacenter rate, 2x its fp32; an H100 runs it at 14.8x its fp32.
  CHECK(gpu_peak(rtx4090, Precision::fp16).flops / gpu_peak(rtx4090, Precision::fp32).flops ==
        Approx(2.0));
  const GpuSpec h100 = card("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980, 2619, 5120);
  CHECK(gpu_peak(h100, Precision::bf16).flops == Approx(989.4e12));
  CHECK(gpu_peak(h100, Precision::tf32).flops == Approx(494.7e12));  // dense, not 989 (sparse)
  CHECK(gpu_peak(h100, Precision::fp32).flops == Approx(66.9e12));
  const GpuSpec a100 = card("NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410, 1593, 5120);
  CHECK(gpu_peak(a100, Precision::fp16).flops == Approx(312e12));
  // The driver gave no SM count or clock: the product's own.
  CHECK(gpu_peak(card("NVIDIA GeForce RTX 3090", 8, 6, 0, 0), Precision::fp32).flops ==
        Approx(35.6e12));
}

TEST_CASE("GPU peaks: the RTX 4090 D is scaled to its 114 SMs, and a card's clock scales too",
          "[device][peaks]") {
  const GpuSpec d = card("NVIDIA GeForce RTX 4090 D", 8, 9, 114, 2520, 10501, 384);
  const GpuPeak fp32 = gpu_peak(d, Precision::fp32);
  // 82.6 x 114/128 = 73.6 TFLOP/s (NVIDIA's RTX 4090 D page: 73.5).
  CHECK(fp32.flops == Approx(82.6e12 * 114 / 128));
  CHECK(fp32.flops / 1e12 == Approx(73.5).margin(0.1));
  CHECK(gpu_peak(d, Precision::bf16).flops == Approx(165.2e12 * 114 / 128));
  CHECK_THAT(fp32.flops_source, Contains("scaled to this card's 114 SMs, 2520 MHz"));
  CHECK_FALSE(fp32.estimated);
  // A factory-overclocked RTX 4090 whose driver reports 2610 MHz.
  const GpuSpec oc = card("NVIDIA GeForce RTX 4090", 8, 9, 128, 2610);
  CHECK(gpu_peak(oc, Precision::fp16).flops == Approx(165.2e12 * 2610 / 2520));
}

TEST_CASE("GPU peaks: a card missing from the table is estimated from SM count and clock",
          "[device][peaks]") {
  // RTX 4060: 24 SMs at 2460 MHz, Ada GeForce: fp32 256 FLOPs per SM per
  // clock = 15.1 TFLOP/s (NVIDIA's page: 15.11), fp16 half-rate 512.
  const GpuSpec g = card("NVIDIA GeForce RTX 4060", 8, 9, 24, 2460);
  const GpuPeak fp32 = gpu_peak(g, Precision::fp32);
  CHECK(fp32.estimated);
  CHECK(fp32.flops == Approx(256.0 * 24 * 2460e6));
  CHECK(fp32.flops / 1e12 == Approx(15.11).margin(0.02));
  CHECK(gpu_peak(g, Precision::fp16).flops == Approx(512.0 * 24 * 2460e6));
  CHECK_THAT(fp32.flops_source, Contains("estimated from SM count and clock") &&
                                    Contains("24 SMs x 2460 MHz") && Contains("GeForce"));
  // The same silicon in a workstation card runs tensor math at full rate.
  const GpuSpec pro = card("NVIDIA RTX 2000 Ada Generation", 8, 9, 22, 2130);
  CHECK(gpu_peak(pro, Precision::bf16).flops == Approx(1024.0 * 22 * 2130e6));
  // An architecture xrun knows no rate for: no figure, and why.
  const GpuPeak b200 = gpu_peak(card("NVIDIA B200", 10, 0, 148, 1965), Precision::bf16);
  CHECK(b200.flops == 0);
  CHECK_THAT(b200.flops_source, Contains("no per-SM rate known for compute capability 10.0"));
  // No clock from the driver: no estimate.
  CHECK(gpu_peak(card("NVIDIA GeForce RTX 4060", 8, 9, 24, 0), Precision::fp32).flops == 0);
  // A precision the card has no math for (Turing: no bf16 or tf32).
  const GpuPeak t4 = gpu_peak(card("Tesla T4", 7, 5, 40, 1590), Precision::bf16);
  CHECK(t4.flops == 0);
  CHECK_THAT(t4.flops_source, Contains("gives no bf16"));
}

TEST_CASE("GPU peaks: memory bandwidth from the driver's memory clock and bus width",
          "[device][peaks]") {
  // Published: RTX 4090 1008 GB/s, RTX 3090 936.2, A100 80GB SXM 2039,
  // H100 SXM 3.35 TB/s; clocks as the driver reports them (deviceQuery).
  struct Case { const char* name; int mem_mhz, bus; double published_gb_s; };
  const Case cases[] = {{"NVIDIA GeForce RTX 4090", 10501, 384, 1008},
                        {"NVIDIA GeForce RTX 3090", 9751, 384, 936.2},
                        {"NVIDIA A100-SXM4-80GB", 1593, 5120, 2039},
                        {"NVIDIA H100 80GB HBM3", 2619, 5120, 3352}};
  for (const Case& c : cases) {
    INFO(c.name);
    const GpuPeak p = gpu_peak(card(c.name, 8, 9, 100, 2000, c.mem_mhz, c.bus), Precision::fp32);
    CHECK(p.bytes_per_s / 1e9 == Approx(c.published_gb_s).epsilon(0.002));
    CHECK_THAT(p.bandwidth_source, Contains(std::to_string(c.bus) + "-bit bus"));
  }
  const GpuPeak none = gpu_peak(card("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520), Precision::fp32);
  CHECK(none.bytes_per_s == 0);
  CHECK_THAT(none.bandwidth_source, Contains("no memory clock or bus width"));
}

TEST_CASE("GPU peaks: a CUDA run's environment gives the card's spec", "[device][peaks]") {
  Environment env;
  env.fields = {{"device_name", "NVIDIA GeForce RTX 4090 D"}, {"compute_capability", "8.9"},
                {"sm_count", "114"}, {"clock_mhz", "2520"}, {"memory_clock_mhz", "10501"},
                {"memory_bus_width", "384"}};
  const GpuSpec g = gpu_spec_from_environment(env);
  CHECK(g.name == "NVIDIA GeForce RTX 4090 D");
  CHECK(g.cc_major == 8);
  CHECK(g.cc_minor == 9);
  CHECK(g.sm_count == 114);
  CHECK(g.clock_mhz == 2520);
  CHECK(g.memory_clock_mhz == 10501);
  CHECK(g.memory_bus_width == 384);
  // A run stored before the bus width was recorded: the rest still parse.
  env.fields.erase("memory_bus_width");
  env.fields["compute_capability"] = "?";
  const GpuSpec old = gpu_spec_from_environment(env);
  CHECK(old.memory_bus_width == 0);
  CHECK(old.cc_major == 0);
  CHECK(old.sm_count == 114);
}
