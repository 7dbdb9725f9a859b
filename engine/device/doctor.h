// engine/device/doctor.h: `xrun doctor`: a plain report of what this machine
// can train on (driver, CUDA runtime, libraries, GPUs and their precisions,
// CPU and oneDNN), as text or JSON, and whether a required device is there.
#pragma once

#include <ostream>
#include <string>

namespace xrun {

// Prints the report to `out` (JSON with the same facts when `json`).
// `require`: "" or "cpu" -> 0 (the CPU is always there); "cuda" -> 0 when a
// usable GPU is present, else 1 with a line on `err` saying why; anything
// else -> 2 with a message on `err` and no report.
int run_doctor(std::ostream& out, std::ostream& err, bool json, const std::string& require);

}  // namespace xrun
