// runner/peak_command.cpp: `xrun doctor --peak`: measures this CPU's peaks
// (engine/cpu/peak_probe.h), prints them and keeps them in the store, where
// every later run on this CPU, oneDNN ISA and thread count finds the peak of
// its precision (attach_peak, called as a run is stored, which gives a GPU
// run its card's peaks from engine/device/gpu_peaks.h).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "engine/cpu/peak_probe.h"
#include "engine/device/device_info.h"
#include "engine/device/gpu_peaks.h"
#include "runner/commands.h"
#include "runner/output.h"
#include "store/store.h"

namespace xrun::cli {

int peak_command(const PeakArgs& args) {
  try {
    if (args.threads < 0 || args.threads > 1024) {  // as train.threads: libgomp fails far below 2^15
      std::cerr << "xrun: doctor --threads " << args.threads
                << ": give 1 to 1024, as train.threads (0 or none: every core)\n";
      return 2;
    }
    const CpuInfo cpu = query_cpu();
    const int threads = args.threads > 0 ? args.threads : omp_get_num_procs();
    std::cout << "measuring " << cpu.model << " (oneDNN ISA " << cpu.onednn_isa << ") on "
              << threads << " thread(s): a " << 2048 << "^3 matmul in fp32"
              << " and bf16 where oneDNN has bf16 kernels, and a 256 MiB copy ...\n";
    const cpu::CpuPeak p = cpu::measure_cpu_peak(threads);
    CpuPeakRecord rec;
    rec.cpu = cpu.model;
    rec.isa = cpu.onednn_isa;
    rec.threads = p.threads;
    rec.fp32_flops = p.fp32_flops;
    rec.bf16_flops = p.bf16_flops;
    rec.copy_bytes_per_s = p.copy_bytes_per_s;
    rec.kernels = "fp32: " + p.fp32_kernel + (p.bf16_kernel.empty() ? "" : ", bf16: " + p.bf16_kernel);
    std::cout << "  fp32 matmul  " << flops_text(p.fp32_flops, "FLOP/s") << " (" << p.fp32_kernel
              << ")\n"
              << "  bf16 matmul  "
              << (p.bf16_flops > 0 ? flops_text(p.bf16_flops, "FLOP/s") + " (" + p.bf16_kernel + ")"
                                   : std::string("- (no oneDNN bf16 kernels on this CPU, or above the ISA cap)"))
              << "\n  copy         " << fixed(p.copy_bytes_per_s / 1e9, 1)
              << " GB/s (read + write)\n";
    store::Store db(args.db);
    db.put_cpu_peak(rec);
    std::cout << "stored in " << args.db << ": runs on this CPU with train.threads = " << threads
              << " now report their % of peak\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "xrun: doctor --peak: " << e.what() << "\n";
    return 1;
  }
}

namespace {

void attach_device_peak(const store::Store& db, const Environment& env, Precision precision,
                        bool gpu, RunSummary& summary) {
  if (gpu) {
    const GpuPeak peak = gpu_peak(gpu_spec_from_environment(env), precision);
    if (peak.flops > 0) {
      summary.peak_flops = peak.flops;
      summary.peak_source = peak.flops_source;
    }
    if (peak.bytes_per_s > 0) {
      summary.peak_bytes_per_s = peak.bytes_per_s;
      summary.peak_bandwidth_source = peak.bandwidth_source;
    }
    return;
  }
  const int threads = std::atoi(env.get("cpu_threads").c_str());
  const auto peak = db.cpu_peak(env.get("device_name"), env.get("onednn_isa"), threads);
  if (!peak) return;
  const std::string measured = std::to_string(threads) + " threads, " + peak->measured_at;
  const double flops = precision == Precision::bf16 ? peak->bf16_flops : peak->fp32_flops;
  if (flops > 0) {
    summary.peak_flops = flops;
    summary.peak_source = std::string("measured by xrun doctor --peak: ") + to_string(precision) +
                          " matmul, " + measured;
  }
  if (peak->copy_bytes_per_s > 0) {
    summary.peak_bytes_per_s = peak->copy_bytes_per_s;
    summary.peak_bandwidth_source = "measured by xrun doctor --peak: a 256 MiB copy, " + measured;
  }
}

}  // namespace

void attach_peak(const store::Store& db, const Environment& env, Precision precision, bool gpu,
                 RunSummary& summary) {
  attach_device_peak(db, env, precision, gpu, summary);
  // N ranks: N devices (or N shares of the cores, each measured at its own
  // thread count) train the run, whose FLOP/s counts every rank's work.
  if (summary.ranks <= 1) return;
  const std::string times = " x " + std::to_string(summary.ranks) + " ranks";
  if (summary.peak_flops > 0) {
    summary.peak_flops *= summary.ranks;
    summary.peak_source += times;
  }
  if (summary.peak_bytes_per_s > 0) {
    summary.peak_bytes_per_s *= summary.ranks;
    summary.peak_bandwidth_source += times;
  }
}

}  // namespace xrun::cli
