// engine/backend.cpp: make_backend, the one place a device string becomes a
// backend, with the checks that must fail before any work starts.
#include "engine/backend.h"

#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun {

std::unique_ptr<Backend> make_backend(const std::string& device, int threads,
                                      const std::string& precision) {
  if (device == "cpu") {
    if (precision != "fp32")
      throw std::runtime_error("precision '" + precision +
                               "' needs a CUDA device; the CPU engine trains in fp32");
    return std::make_unique<cpu::CpuBackend>(threads);
  }
  if (device.rfind("cuda:", 0) == 0)
    throw std::runtime_error("device " + device +
                             ": this build has no CUDA engine yet; use train.device = \"cpu\"");
  throw std::runtime_error("unknown device '" + device + "' (cpu, cuda:N)");
}

}  // namespace xrun
