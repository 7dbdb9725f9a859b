// profiler/cupti_compat.h: the CUPTI activity record structs of the CUPTI
// this build compiles against, in one place. CUPTI delivers each record in
// the newest version of its struct that the running library knows; the
// fields xrun reads (times, stream, correlation id, name, copy kind and
// bytes) sit at the same place in every version of one CUDA major, so a
// build decodes the records of any CUPTI of its own major (cupti_api.cpp
// loads only libcupti.so.N of the major it was built with).
//   kernels: CUpti_ActivityKernel9 in CUDA 12.x, CUpti_ActivityKernel10 in 13
//   copies:  CUpti_ActivityMemcpy5 before CUDA 12.8, CUpti_ActivityMemcpy6 from it
#pragma once

#include <cuda.h>
#include <cupti_activity.h>

#if CUDA_VERSION < 12020
#error "xrun's CUPTI collector needs CUDA 12.2 or newer"
#endif

namespace xrun::profiler {

#if CUDA_VERSION >= 13000
using CuptiKernelRecord = CUpti_ActivityKernel10;
#else
using CuptiKernelRecord = CUpti_ActivityKernel9;
#endif

#if CUDA_VERSION >= 12080
using CuptiMemcpyRecord = CUpti_ActivityMemcpy6;
#else
using CuptiMemcpyRecord = CUpti_ActivityMemcpy5;
#endif

using CuptiMemsetRecord = CUpti_ActivityMemset4;

}  // namespace xrun::profiler
