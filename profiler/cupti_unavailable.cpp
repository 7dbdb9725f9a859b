// profiler/cupti_unavailable.cpp: ActivityCapture::start in a build without
// CUPTI (no CUDA toolkit): tracing is off, and the run says why.
#include "profiler/activity_capture.h"

namespace xrun::profiler {

std::unique_ptr<ActivityCapture> ActivityCapture::start(std::string& why_not) {
  why_not = "this xrun was built without CUPTI (no CUDA toolkit at configure time)";
  return nullptr;
}

}  // namespace xrun::profiler
