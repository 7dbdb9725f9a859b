// engine/device/gpu_peaks.cpp: the published dense peak table, the
// architectures' FLOPs per SM per clock for cards missing from it, and the
// bandwidth arithmetic (see gpu_peaks.h).
#include "engine/device/gpu_peaks.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace xrun {
namespace {

// Dense FLOPs per SM per clock by compute capability: fp32 on the CUDA cores
// (2 per FMA), tf32 and fp16/bf16 on the tensor cores with fp32 accumulation,
// for datacenter/workstation parts and for GeForce parts, which run the
// tensor math with fp32 accumulation at half rate. 0: no such math, or not
// published. bf16 = fp16 from sm_80 on; no tf32 or bf16 before sm_80.
struct ArchRate {
  int cc;  // major * 10 + minor
  double fp32, tf32, fp16, tf32_geforce, fp16_geforce;
};
constexpr ArchRate kArchRates[] = {
    {70, 128, 0, 1024, 0, 1024},       // Volta: 8 tensor cores x 64 FMA
    {75, 128, 0, 1024, 0, 512},        // Turing
    {80, 128, 1024, 2048, 1024, 2048}, // A100: 4 tensor cores x 256 FMA
    {86, 256, 512, 1024, 256, 512},    // GA10x
    {89, 256, 512, 1024, 256, 512},    // Ada
    {90, 256, 2048, 4096, 2048, 4096}, // Hopper
    {120, 256, 0, 0, 256, 512},        // Blackwell GeForce (RTX 50)
};

// The published table. Clocks are the peak SM clock the driver reports for
// the reference card (deviceQuery's "GPU Max Clock rate"), which is what
// scaling compares against; where NVIDIA states a product's tensor figures
// at a lower clock (H100), the figure is kept as published.
const std::vector<PublishedGpuPeak> kPublished = {
    // product, compute capability, half-rate tensor math with fp32 accumulate,
    // SMs, MHz, dense TFLOP/s fp32, tf32, fp16, bf16, document
    {"V100-SXM2", 70, false, 80, 1530, 15.7, 0, 125, 0, "NVIDIA Tesla V100 data sheet"},
    {"V100-PCIE", 70, false, 80, 1380, 14.0, 0, 112, 0, "NVIDIA Tesla V100 data sheet"},
    {"T4", 75, false, 40, 1590, 8.1, 0, 65, 0, "NVIDIA T4 data sheet"},
    {"RTX 2080 Ti", 75, true, 68, 1545, 13.4, 0, 53.8, 0, "NVIDIA Turing architecture whitepaper"},
    {"A100", 80, false, 108, 1410, 19.5, 156, 312, 312, "NVIDIA A100 data sheet"},
    {"A10", 86, false, 72, 1695, 31.2, 62.5, 125, 125, "NVIDIA A10 data sheet"},
    {"A40", 86, false, 84, 1740, 37.4, 74.8, 149.7, 149.7, "NVIDIA A40 data sheet"},
    {"RTX 3080", 86, true, 68, 1710, 29.8, 29.8, 59.5, 59.5, "NVIDIA Ampere GA102 whitepaper"},
    {"RTX 3080 Ti", 86, true, 80, 1665, 34.1, 34.1, 68.2, 68.2, "NVIDIA Ampere GA102 whitepaper"},
    {"RTX 3090", 86, true, 82, 1695, 35.6, 35.6, 71, 71, "NVIDIA Ampere GA102 whitepaper"},
    {"RTX 3090 Ti", 86, true, 84, 1860, 40, 40, 80, 80, "NVIDIA Ampere GA102 whitepaper"},
    {"L4", 89, false, 58, 2040, 30.3, 60, 121, 121, "NVIDIA L4 data sheet"},
    {"L40", 89, true, 142, 2490, 90.5, 90.5, 181.05, 181.05, "NVIDIA L40 data sheet"},
    {"L40S", 89, false, 142, 2520, 91.6, 183, 362.05, 362.05, "NVIDIA L40S data sheet"},
    {"RTX 4080", 89, true, 76, 2505, 48.7, 48.7, 97.5, 97.5, "NVIDIA Ada Lovelace architecture whitepaper"},
    {"RTX 4090", 89, true, 128, 2520, 82.6, 82.6, 165.2, 165.2, "NVIDIA Ada Lovelace architecture whitepaper"},
    {"H100", 90, false, 132, 1980, 66.9, 494.7, 989.4, 989.4, "NVIDIA H100 (SXM5) data sheet"},
    {"H100 PCIe", 90, false, 114, 1755, 51.2, 378, 756, 756, "NVIDIA H100 data sheet"},
    {"H100 NVL", 90, false, 132, 1785, 60, 417.5, 835.5, 835.5, "NVIDIA H100 NVL data sheet"},
    {"H200", 90, false, 132, 1980, 66.9, 494.7, 989.4, 989.4, "NVIDIA H200 (SXM) data sheet"},
    {"H200 NVL", 90, false, 132, 1785, 60, 417.5, 835.5, 835.5, "NVIDIA H200 NVL data sheet"},
    {"RTX 5090", 120, true, 170, 2407, 104.8, 104.8, 209.5, 209.5, "NVIDIA RTX Blackwell GPU architecture whitepaper"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// `key` occurs in `text` with no letter or digit on either side.
bool contains_words(const std::string& text, const std::string& key) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const bool left = at == 0 || !word_char(text[at - 1]);
    const size_t end = at + key.size();
    const bool right = end == text.size() || !word_char(text[end]);
    if (left && right) return true;
  }
  return false;
}

std::string num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

const char* math_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32 (CUDA cores)";
    case Precision::tf32: return "tf32 tensor";
    case Precision::fp16: return "fp16 tensor with fp32 accumulate";
    case Precision::bf16: return "bf16 tensor with fp32 accumulate";
  }
  return "?";
}

double row_tflops(const PublishedGpuPeak& row, Precision p) {
  switch (p) {
    case Precision::fp32: return row.fp32_tflops;
    case Precision::tf32: return row.tf32_tflops;
    case Precision::fp16: return row.fp16_tflops;
    case Precision::bf16: return row.bf16_tflops;
  }
  return 0;
}

const ArchRate* arch_rate(int cc) {
  for (const ArchRate& a : kArchRates)
    if (a.cc == cc) return &a;
  return nullptr;
}

void set_flops(const GpuSpec& gpu, Precision p, GpuPeak& out) {
  const std::string math = math_name(p);
  if (const PublishedGpuPeak* row = find_published_gpu_peak(gpu.name)) {
    const double tflops = row_tflops(*row, p);
    if (!(tflops > 0)) {
      out.flops_source = std::string(row->document) + " gives no " + math + " figure for the " +
                         row->product;
      return;
    }
    const int sms = gpu.sm_count > 0 ? gpu.sm_count : row->sm_count;
    const int mhz = gpu.clock_mhz > 0 ? gpu.clock_mhz : row->clock_mhz;
    out.flops = tflops * 1e12 * (static_cast<double>(sms) / row->sm_count) *
                (static_cast<double>(mhz) / row->clock_mhz);
    out.flops_source = std::string(row->document) + ": " + row->product + ", " + math + ", dense " +
                       num(tflops, 1) + " TFLOP/s at " + std::to_string(row->sm_count) + " SMs, " +
                       std::to_string(row->clock_mhz) + " MHz";
    if (sms != row->sm_count || mhz != row->clock_mhz)
      out.flops_source += "; scaled to this card's " + std::to_string(sms) + " SMs, " +
                          std::to_string(mhz) + " MHz";
    return;
  }
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  const bool geforce = contains_words(lower(gpu.name), "geforce");
  const double rate = gpu_flops_per_sm_clock(cc, p, geforce);
  const std::string cc_text = std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor);
  if (!(rate > 0) || gpu.sm_count <= 0 || gpu.clock_mhz <= 0) {
    out.flops_source = "no published " + math + " figure for " +
                       (gpu.name.empty() ? std::string("this GPU") : gpu.name) +
                       (rate > 0 ? ", and the driver reported no SM count or clock"
                                 : " and no per-SM rate known for compute capability " + cc_text +
                                       (geforce ? " GeForce" : ""));
    return;
  }
  out.estimated = true;
  out.flops = rate * gpu.sm_count * gpu.clock_mhz * 1e6;
  out.flops_source = "estimated from SM count and clock: " + num(rate, 0) + " FLOP per SM per clock (" +
                     math + ", compute capability " + cc_text + (geforce ? " GeForce" : "") +
                     ") x " + std::to_string(gpu.sm_count) + " SMs x " +
                     std::to_string(gpu.clock_mhz) + " MHz";
}

}  // namespace

const std::vector<PublishedGpuPeak>& published_gpu_peaks() { return kPublished; }

double gpu_flops_per_sm_clock(int cc, Precision p, bool half_rate) {
  const ArchRate* a = arch_rate(cc);
  if (!a) return 0;
  switch (p) {
    case Precision::fp32: return a->fp32;
    case Precision::tf32: return half_rate ? a->tf32_geforce : a->tf32;
    case Precision::fp16: return half_rate ? a->fp16_geforce : a->fp16;
    case Precision::bf16: return a->cc >= 80 ? (half_rate ? a->fp16_geforce : a->fp16) : 0;
  }
  return 0;
}

const PublishedGpuPeak* find_published_gpu_peak(const std::string& name) {
  const std::string text = lower(name);
  const PublishedGpuPeak* best = nullptr;
  size_t best_length = 0;
  for (const PublishedGpuPeak& row : kPublished) {
    const std::string key = lower(row.product);
    if (key.size() > best_length && contains_words(text, key)) {
      best = &row;
      best_length = key.size();
    }
  }
  return best;
}

GpuPeak gpu_peak(const GpuSpec& gpu, Precision precision) {
  GpuPeak out;
  set_flops(gpu, precision, out);
  if (gpu.memory_clock_mhz > 0 && gpu.memory_bus_width > 0) {
    out.bytes_per_s = 2.0 * gpu.memory_clock_mhz * 1e6 * gpu.memory_bus_width / 8.0;
    out.bandwidth_source = "memory clock " + std::to_string(gpu.memory_clock_mhz) + " MHz x 2 x " +
                           std::to_string(gpu.memory_bus_width) + "-bit bus, as the driver reports them";
  } else {
    out.bandwidth_source = "the driver reported no memory clock or bus width";
  }
  return out;
}

GpuSpec gpu_spec_from_environment(const Environment& env) {
  const auto number = [&](const char* key) { return std::atoi(env.get(key).c_str()); };
  GpuSpec gpu;
  gpu.name = env.get("device_name");
  const std::string cc = env.get("compute_capability");
  if (std::sscanf(cc.c_str(), "%d.%d", &gpu.cc_major, &gpu.cc_minor) != 2)
    gpu.cc_major = gpu.cc_minor = 0;
  gpu.sm_count = number("sm_count");
  gpu.clock_mhz = number("clock_mhz");
  gpu.memory_clock_mhz = number("memory_clock_mhz");
  gpu.memory_bus_width = number("memory_bus_width");
  return gpu;
}

GpuSpec gpu_spec(const GpuInfo& g) {
  GpuSpec gpu;
  gpu.name = g.name;
  gpu.cc_major = g.cc_major;
  gpu.cc_minor = g.cc_minor;
  gpu.sm_count = g.sm_count;
  gpu.clock_mhz = g.clock_mhz;
  gpu.memory_clock_mhz = g.memory_clock_mhz;
  gpu.memory_bus_width = g.memory_bus_width;
  return gpu;
}

}  // namespace xrun
