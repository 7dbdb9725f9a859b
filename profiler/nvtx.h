// profiler/nvtx.h: NVTX ranges in one domain, "xrun", with registered
// strings: what Nsight Systems shows on the timeline (run, epoch, step and
// inside a step data_wait, h2d, forward, backward, optimizer; one range per
// layer with profile.layers; loader threads named). NVTX3 is header-only and
// costs a branch when no tool is attached; a build without the CUDA
// toolkit's NVTX headers compiles the calls away.
#pragma once

#include <cstdint>
#include <string>

namespace xrun::profiler {

// Told of every range the training thread pushes and pops (CUPTI's external
// correlation ids follow them: profiler/activity_capture.h).
class RangeListener {
 public:
  virtual ~RangeListener() = default;
  virtual void on_push(const std::string& name) = 0;
  virtual void on_pop() = 0;
};

class Nvtx {
 public:
  // profile.nvtx: off = every call returns at once.
  static void set_enabled(bool on);
  static bool enabled();
  // Pushes a range named `name` (registered once per name) with an int64
  // payload when payload >= 0 (the step or epoch index).
  static void push(const std::string& name, int64_t payload = -1);
  static void pop();
  // Names the calling OS thread ("xrun loader 0").
  static void name_this_thread(const std::string& name);
  // At most one listener; nullptr removes it. Called whether or not NVTX is enabled.
  static void set_listener(RangeListener* listener);
};

// A range for the lifetime of a scope.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name, int64_t payload = -1) { Nvtx::push(name, payload); }
  ~NvtxRange() { Nvtx::pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace xrun::profiler
