// engine/data/open_dataset.cpp: open_dataset, the one entry point that turns
// a DataConfig into a checked Dataset for a split: common settings are
// validated here, then the source's own reader checks its files; and the
// fingerprint that identifies a split's content (dataset_fingerprint).
#include "engine/data/sources.h"

#include <algorithm>

#include "core/sha256.h"

namespace xrun::data {

const char* split_name(Split split) { return split == Split::train ? "train" : "test"; }

std::string dataset_fingerprint(const Dataset& d) {
  const size_t sample_bytes = static_cast<size_t>(d.channels()) * d.height() * d.width();
  std::string text = std::to_string(d.size()) + " " + std::to_string(d.channels()) + "x" +
                     std::to_string(d.height()) + "x" + std::to_string(d.width()) + " " +
                     std::to_string(d.num_classes()) + "\n";
  constexpr int64_t kSamples = 64;
  const int64_t n = d.size();
  std::vector<uint8_t> sample(sample_bytes);
  for (int64_t k = 0; k < std::min(n, kSamples); ++k) {
    const int64_t index = n <= kSamples ? k : k * (n - 1) / (kSamples - 1);
    int32_t label = 0;
    d.get(index, sample.data(), &label);
    text.append(reinterpret_cast<const char*>(sample.data()), sample.size());
    text.append(reinterpret_cast<const char*>(&label), sizeof label);
  }
  return sha256_hex(text);
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& cfg, Split split, uint64_t seed) {
  if (cfg.image_size < 1 || cfg.image_size > 8192)
    throw DataError("data.image_size must be in 1..8192, not " + std::to_string(cfg.image_size));
  const int64_t limit = split == Split::train ? cfg.limit : cfg.test_limit;
  if (limit < 0)
    throw DataError(std::string("data.") + (split == Split::train ? "limit" : "test_limit") +
                    " must be >= 0 (0 = all samples)");
  if (cfg.source == "synthetic") return open_synthetic(cfg, split, seed, limit);
  if (cfg.source != "cifar10" && cfg.source != "idx")
    throw DataError("unknown data source '" + cfg.source + "' (cifar10, idx or synthetic)");
  const std::string dir = cfg.path.empty() ? source_defaults(cfg.source).path : cfg.path;
  if (cfg.source == "cifar10") return open_cifar10(cfg, split, dir, limit);
  return open_idx(cfg, split, dir, limit);
}

}  // namespace xrun::data
