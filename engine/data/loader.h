// engine/data/loader.h: batches for the training loop. Worker threads decode
// and augment samples into a ring of `prefetch` batch slots; the training
// thread takes filled slots in order and gives them back. The shuffle order
// and every augmentation draw depend only on (seed, epoch, sample position),
// never on the number of workers, so runs are reproducible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/data/dataset.h"

namespace xrun::data {

// Host memory for batch slots: the CUDA engine passes pinned allocations.
struct HostAllocator {
  std::function<void*(size_t)> allocate;   // default: 64-byte aligned malloc
  std::function<void(void*)> release;
};

struct LoaderOptions {
  int batch_size = 32;
  bool shuffle = true;
  bool drop_last = true;     // training: true; evaluation: false (last batch partial)
  bool random_crop = false;  // pad 4 (zeros) and crop back at a random offset
  bool hflip = false;        // flip with probability 1/2
  // The draws are made here, the pixels moved by the consumer (the CUDA
  // backend, on the device): batches hold the samples as read, and each
  // sample's draw in HostBatch::draws.
  bool augment_elsewhere = false;
  int workers = 2;           // 0: batches are made on the calling thread
  int prefetch = 2;          // ring slots (>= 1)
  uint64_t seed = 0;
  // Data-parallel ranks: global batch b is batch_size x ranks consecutive
  // positions of the epoch's order, and rank r takes the r-th slice of
  // batch_size (so the ranks together see what one process with
  // accumulate = ranks sees). drop_last: every rank gets the same number of
  // batches; otherwise a rank's last batch may be partial or absent.
  int rank = 0, ranks = 1;
  HostAllocator allocator;   // empty functions = aligned malloc
  // Called first on each worker thread with its number (e.g. to name it for
  // a profiler).
  std::function<void(int worker)> on_worker_start;
};

// One batch: `count` valid samples; the slot always holds batch_size samples
// of room. images: batch_size x C x H x W uint8 (NCHW); labels: int32.
struct HostBatch {
  const uint8_t* images = nullptr;
  const int32_t* labels = nullptr;
  // augment_elsewhere: per sample crop_y, crop_x, flip (0/1) as AugmentDraw
  // gives them (3 int32 each, batch_size samples of room); else nullptr.
  const int32_t* draws = nullptr;
  int count = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
};

// Zero pixels added on each side before random_crop crops back to size.
constexpr int kCropPad = 4;

// The sample order of `epoch` with shuffle on: a permutation of 0..n-1 that
// depends on (seed, epoch) alone (mt19937_64 + own Fisher-Yates and uniform
// integers, so every platform gives the same order). Writes order[0..n).
void epoch_permutation(uint64_t seed, int64_t epoch, int64_t* order, int64_t n);

// The augmentation of the sample at `position` (0-based, within the epoch's
// order) of `epoch`: crop offsets in [0, 2*kCropPad] and the flip, drawn from
// (seed, epoch, position) alone. Crop offsets are drawn even when only hflip
// is on, so turning one augmentation on never changes the other's draws.
struct AugmentDraw {
  int crop_y = 0, crop_x = 0;
  bool flip = false;
};
AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t position);

// One sample's augmentation as the loader applies it: pad-and-crop at the
// draw's offsets (random_crop), then the flip (hflip and the draw's flip).
// `src` and `dst` are C x H x W uint8 and must not overlap. The reference for
// the CUDA backend, which applies the same draws on the device.
void augment_sample(const uint8_t* src, uint8_t* dst, int c, int h, int w, bool random_crop,
                    bool hflip, const AugmentDraw& draw);

class Loader {
 public:
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();  // stops and joins the workers
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;
  // Starts producing the batches of `epoch` (any batch of an earlier epoch
  // not yet taken is discarded). `first_batch` skips ahead (resume).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // Blocks until the next batch of the current epoch is ready; nullptr when
  // the epoch is done (or none was started). With workers = 0 the batch is
  // made here, and *wait_ms is the time that took. *wait_ms receives the time spent blocked. Rethrows a
  // worker's exception.
  const HostBatch* next(double* wait_ms = nullptr);
  // Returns the slot of a batch taken by next() to the ring. Every taken batch
  // must be released, also across start_epoch (a slot still held is never
  // refilled); next() throws std::logic_error rather than wait forever when
  // the slot it needs is still held. next/release/start_epoch are called from
  // one thread (the training loop).
  void release(const HostBatch* batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xrun::data
