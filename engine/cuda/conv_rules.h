// engine/cuda/conv_rules.h: which cuDNN convolution candidates a run accepts
// and the math type it executes the chosen one with. Plain functions of
// cuDNN's enums, so they are tested where no GPU is
// (tests/engine/cuda_rules_test.cpp).
#pragma once

#include <cudnn.h>

#include <cstddef>

#include "core/config.h"

namespace xrun::cuda {

// A candidate from Get*_v7 or Find*Ex is usable when cuDNN ran (or would
// run) it successfully and its workspace fits the limit. Its reported math
// type does not matter: see execution_math.
inline bool usable_candidate(cudnnStatus_t status, size_t workspace, size_t limit) {
  return status == CUDNN_STATUS_SUCCESS && workspace <= limit;
}

// The math type a chosen algorithm is executed with. fp32 means no TF32
// anywhere: the search runs with CUDNN_FMA_MATH set on the descriptor, so
// every candidate it returns is one cuDNN can run with FMA math, but cuDNN 9
// may report another math type (DEFAULT_MATH) for it; an fp32 run executes
// with FMA whatever was reported. tf32, fp16 and bf16 execute with the math
// type cuDNN reported for the candidate (API_NOTES: set perf.mathType).
inline cudnnMathType_t execution_math(Precision precision, cudnnMathType_t reported) {
  return precision == Precision::fp32 ? CUDNN_FMA_MATH : reported;
}

}  // namespace xrun::cuda
