// engine/distributed/gradient_buckets.cpp: see gradient_buckets.h.
#include "engine/distributed/gradient_buckets.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace xrun::dist {

namespace {

// The pieces' starts ascending, once each, the first moved to 0 (anything
// below the first parameter goes with it).
std::vector<size_t> piece_starts(std::vector<size_t> pieces, size_t floats) {
  std::sort(pieces.begin(), pieces.end());
  pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
  if (pieces.empty() || pieces.back() >= floats)
    throw std::invalid_argument("GradientBuckets: every piece must start inside the region");
  pieces.front() = 0;
  return pieces;
}

}  // namespace

GradientBuckets::GradientBuckets(Communicator& comm, std::span<float> grads,
                                 std::vector<size_t> pieces, size_t bucket_bytes)
    : comm_(comm),
      grads_(grads),
      starts_(piece_starts(std::move(pieces), grads.size())),
      bucket_floats_(std::max<size_t>(1, bucket_bytes / sizeof(float))) {
  reset();
  worker_ = std::thread([this] { work(); });
}

GradientBuckets::GradientBuckets(Communicator& comm, DeviceRegion region,
                                 std::vector<size_t> pieces, size_t bucket_bytes)
    : comm_(comm),
      grads_(region.data, region.count),  // device memory: its bounds only, never read here
      starts_(piece_starts(std::move(pieces), region.count)),
      bucket_floats_(std::max<size_t>(1, bucket_bytes / sizeof(float))) {
  device_ = std::move(region);
  reset();
}

void GradientBuckets::reset() {
  ready_.assign(starts_.size(), false);
  frontier_ = starts_.size();
  top_ = grads_.size();
}

GradientBuckets::~GradientBuckets() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void GradientBuckets::ready(size_t begin) {
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), begin);
  const size_t k = static_cast<size_t>(it - starts_.begin()) - 1;  // the piece holding `begin`
  ready_[k] = true;
  while (frontier_ > 0 && ready_[frontier_ - 1]) --frontier_;
  if (frontier_ < starts_.size() && top_ - starts_[frontier_] >= bucket_floats_) {
    launch(starts_[frontier_], top_);
    top_ = starts_[frontier_];
  }
}

void GradientBuckets::launch(size_t begin, size_t end) {
  if (device_) {  // queued on the device; finish() waits
    if (device_->before) device_->before(begin, end);
    comm_.all_reduce_sum_device_async(device_->data + begin, end - begin, device_->stream);
    ++buckets_;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(begin, end);
    ++launched_;
  }
  ++buckets_;
  cv_.notify_all();
}

void GradientBuckets::work() {
  for (;;) {
    std::pair<size_t, size_t> range;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      range = queue_.front();
      queue_.pop_front();
    }
    bool skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      skip = error_ != nullptr;  // after a failure the ranks no longer agree
    }
    std::exception_ptr failed;
    const auto t0 = std::chrono::steady_clock::now();
    if (!skip) {
      try {
        comm_.all_reduce_sum(grads_.data() + range.first, range.second - range.first);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed && !error_) error_ = failed;
      busy_ms_ += ms;
      ++done_;
    }
    cv_.notify_all();
  }
}

double GradientBuckets::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  if (top_ > 0) launch(0, top_);
  if (device_) {
    last_buckets_ = buckets_;
    buckets_ = 0;
    reset();
    last_busy_ms_ = comm_.wait_device(device_->stream);  // rethrows a failed sum
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::exception_ptr failed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == launched_; });
    failed = error_;
    last_busy_ms_ = busy_ms_;
    busy_ms_ = 0;
  }
  last_buckets_ = buckets_;
  buckets_ = 0;
  reset();
  if (failed) std::rethrow_exception(failed);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace xrun::dist
