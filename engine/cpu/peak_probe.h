// engine/cpu/peak_probe.h: this CPU's measured peaks, for `xrun doctor
// --peak` and every later run's "% of peak": the FLOP/s of a large matmul
// through oneDNN's own kernels in fp32 and, where the CPU has oneDNN bf16
// kernels (AMX or AVX512_BF16), in bf16 (bf16 inputs, fp32 output, as the
// bf16 engine's GEMMs); and the bytes per second of a parallel copy (read +
// write). Each the best of several timed repeats on `threads` threads,
// under the ISA oneDNN runs with (ONEDNN_MAX_CPU_ISA caps it).
#pragma once

#include <string>

namespace xrun::cpu {

struct CpuPeak {
  int threads = 0;
  double fp32_flops = 0;
  double bf16_flops = 0;        // 0: no oneDNN bf16 kernels on this CPU
  double copy_bytes_per_s = 0;  // read + write
  std::string fp32_kernel, bf16_kernel;  // oneDNN's implementation names
};

// A few seconds on two cores. `size`: the matmuls' M = N = K.
CpuPeak measure_cpu_peak(int threads, int size = 2048);

}  // namespace xrun::cpu
