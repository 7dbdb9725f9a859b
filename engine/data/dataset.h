// engine/data/dataset.h: random access to labelled uint8 images, one class per
// source format (CIFAR-10 binary, IDX, synthetic). Images are CHW uint8 at the
// size the run asks for (data.image_size, data.channels); a dataset that holds
// another size places its images there (bilinear resize, gray replicated to
// the channels asked for). Files are read and checked when the dataset is
// opened, so a missing, truncated or malformed file fails before training.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/system_memory.h"

namespace xrun::data {

// A dataset file problem: what() names the file and what was wrong with it.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Refuses a sample count whose bookkeeping (the shuffle order, a token
// window's start: `bytes_each` a sample) would take more than half the
// memory available: a DataError naming `key`, the count and the bytes,
// before anything is allocated (a synthetic set of 1e11 samples).
inline void check_sample_count(int64_t samples, int64_t bytes_each, const std::string& key) {
  const int64_t available = available_memory_bytes();
  if (available <= 0 || samples <= available / 2 / bytes_each) return;
  throw DataError(key + " = " + std::to_string(samples) + ": indexing that many samples takes " +
                  std::to_string(samples) + " x " + std::to_string(bytes_each) + " bytes, more "
                  "than half of the " + std::to_string(available) +
                  " bytes this machine has available");
}

enum class Split { train, test };

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int channels() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  virtual int num_classes() const = 0;
  // Writes sample `index` as channels()*height()*width() bytes, CHW, and its
  // label. Thread-safe: loader workers call it concurrently.
  virtual void get(int64_t index, uint8_t* chw, int32_t* label) const = 0;
  // One line for logs: "cifar10 train: 50000 images from data/cifar-10-batches-bin".
  virtual std::string describe() const = 0;
};

// What identifies a split's content, where its path does not (two folders
// of IDX files, two corpora): SHA-256 (hex) over its size, its sample shape
// and classes, and 64 samples spread evenly across it, each with its label
// (token windows included). Reads 64 samples, whatever the split's size.
std::string dataset_fingerprint(const Dataset& d);

// Opens the split named by cfg.source, honouring image_size, channels,
// num_classes (synthetic), limit / test_limit. Throws DataError.
std::unique_ptr<Dataset> open_dataset(const DataConfig& cfg, Split split, uint64_t seed);

// Native properties of a source, for resolving defaults before any file is
// read: classes, channels, image size, mean/std, default path.
struct SourceDefaults {
  int num_classes;
  int channels;
  int image_size;
  std::vector<float> mean, std;
  std::string path;
};
SourceDefaults source_defaults(const std::string& source);

}  // namespace xrun::data
