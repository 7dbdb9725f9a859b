// profiler/findings.h: the classic troubleshooting checks, run on a finished
// run's figures and stored with it as findings that `xrun show` prints:
// steps waiting for data, fp16 loss-scale back-offs, cuDNN autotuning off on
// a convolution network, unsteady step times, too few measured steps.
// (Device-to-host copies per step and GPU idle time inside a step need
// CUPTI's records.)
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/records.h"

namespace xrun::profiler {

struct Finding {
  std::string check;    // data_wait, loss_scale_backoff, cudnn_benchmark_off, ...
  std::string message;  // what was seen and what to try
  double value = 0;     // the figure behind it (a share, a count)
};

std::vector<Finding> run_findings(const RunConfig& cfg, const RunSummary& summary);

}  // namespace xrun::profiler
