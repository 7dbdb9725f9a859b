// engine/device/gpu_peaks.h: a GPU's peak FLOP/s for a training precision and
// its peak memory bandwidth, for every run's "% of peak" and the roofline.
//
// FLOP/s: a table of NVIDIA's published dense peaks per product (data sheets
// and architecture whitepapers; never the 2:4-sparsity figures, which are
// twice as high), for fp32 on the CUDA cores and tf32 / fp16 / bf16 on the
// tensor cores with fp32 accumulation (GeForce cards run that at half the
// rate of datacenter parts of the same architecture). The figure is scaled by
// the SM count and clock the driver reports against the product's own, so a
// cut-down or factory-overclocked variant comes out right (an RTX 4090 D's
// 114 SMs take 114/128 of the RTX 4090's figure). A card not in the table gets
// the architecture's FLOPs per SM per clock x SMs x clock, marked "estimated
// from SM count and clock".
//
// Bandwidth: memory clock x 2 (double data rate, as the driver reports the
// clock for GDDR and HBM alike) x bus width / 8, from the driver.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/records.h"
#include "engine/device/device_info.h"

namespace xrun {

// What the driver says about a GPU (GpuInfo, or a stored run's environment).
struct GpuSpec {
  std::string name;            // "NVIDIA GeForce RTX 4090 D"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int clock_mhz = 0;           // peak SM clock (cudaDevAttrClockRate)
  int memory_clock_mhz = 0;    // cudaDevAttrMemoryClockRate
  int memory_bus_width = 0;    // bits
};

// One row of the published table: dense TFLOP/s (0 where the product has no
// such math) at `sm_count` SMs and the `clock_mhz` its driver reports.
struct PublishedGpuPeak {
  const char* product;  // matched as whole words in the driver's name: "RTX 4090"
  int cc;               // compute capability, major * 10 + minor
  bool half_rate;       // tensor math with fp32 accumulate at half rate (GeForce, L40)
  int sm_count;
  int clock_mhz;
  double fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops;
  const char* document;  // where the figures are stated
};

const std::vector<PublishedGpuPeak>& published_gpu_peaks();

// The table row for a driver name: the longest product name found in it as
// whole words ("NVIDIA GeForce RTX 3090 Ti" -> "RTX 3090 Ti", not "RTX 3090");
// nullptr when none.
const PublishedGpuPeak* find_published_gpu_peak(const std::string& name);

// The architecture's dense FLOPs per SM per clock for `precision` (fp32 on the
// CUDA cores, the others on the tensor cores with fp32 accumulation), at
// GeForce's half rate where `half_rate`; 0 where the architecture has no such
// math or xrun knows no rate (cc = major * 10 + minor).
double gpu_flops_per_sm_clock(int cc, Precision precision, bool half_rate);

struct GpuPeak {
  double flops = 0;          // 0: not known (why in flops_source)
  std::string flops_source;
  bool estimated = false;    // from the architecture's rate, not a table row
  double bytes_per_s = 0;    // 0: the driver gave no memory clock or bus width
  std::string bandwidth_source;
};

GpuPeak gpu_peak(const GpuSpec& gpu, Precision precision);

// The GpuSpec a CUDA run's environment records (device_name,
// compute_capability "8.9", sm_count, clock_mhz, memory_clock_mhz,
// memory_bus_width); fields it lacks stay 0.
GpuSpec gpu_spec_from_environment(const Environment& env);
GpuSpec gpu_spec(const GpuInfo& gpu);

}  // namespace xrun
