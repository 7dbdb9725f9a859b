// engine/distributed/gradient_buckets.h: gradients summed across ranks in
// buckets while the backward pass still runs (as PyTorch's DDP does): the
// backward pass reports each layer's parameters as their gradients become
// complete, last layer first; once the complete gradients at the top of the
// flat region reach `bucket_bytes`, that bucket is handed to a thread of its
// own that all-reduces it while the backward pass goes on; finish() sends
// what is left and waits. Every rank cuts the same buckets in the same order
// (the same model reports the same layers in the same order), as the
// collectives require. What finish() waits is the exposed time.
// With gradients in device memory (NCCL) there is no thread: each bucket
// is queued from ready() on the communicator's own stream after the
// backward kernels queued so far (all_reduce_sum_device_async), and
// finish() waits for them on the device.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "engine/distributed/communicator.h"

namespace xrun::dist {

class GradientBuckets {
 public:
  // `grads`: the flat region the update reads; `pieces`: where each
  // parameter's gradient starts in it (in floats, any order; a piece runs
  // to the next one's start, the highest to the region's end, so padding
  // between them is reduced with them).
  GradientBuckets(Communicator& comm, std::span<float> grads, std::vector<size_t> pieces,
                  size_t bucket_bytes);
  // Device memory: `count` floats at `data`, summed after the work queued on
  // CUDA stream `stream`; `before(begin, end)` runs first on each bucket's
  // range (an fp16 run's half-precision gradients folded in).
  struct DeviceRegion {
    float* data = nullptr;
    size_t count = 0;
    void* stream = nullptr;
    std::function<void(size_t, size_t)> before;
  };
  GradientBuckets(Communicator& comm, DeviceRegion region, std::vector<size_t> pieces,
                  size_t bucket_bytes);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The gradient starting at `begin` (one of `pieces`) is complete.
  void ready(size_t begin);
  // Sends what is left, waits for every bucket of the step and returns how
  // long it waited (ms). Rethrows the error of a failed all-reduce. The next
  // step starts afresh.
  double finish();
  int buckets_last_step() const { return last_buckets_; }
  // The time the all-reduces of the last step took on their thread (ms),
  // hidden or not: what the bus bandwidth is measured over.
  double busy_ms_last_step() const { return last_busy_ms_; }

 private:
  void launch(size_t begin, size_t end);
  void work();
  void reset();

  std::optional<DeviceRegion> device_;
  Communicator& comm_;
  std::span<float> grads_;
  std::vector<size_t> starts_;  // ascending
  size_t bucket_floats_;
  std::vector<bool> ready_;
  size_t frontier_;  // pieces [frontier_, n) are complete
  size_t top_;       // floats [top_, end) are launched
  int buckets_ = 0, last_buckets_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<size_t, size_t>> queue_;
  size_t launched_ = 0, done_ = 0;
  double busy_ms_ = 0, last_busy_ms_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace xrun::dist
