// engine/data/open_dataset.cpp: open_dataset, the one entry point that turns
// a DataConfig into a checked Dataset for a split: common settings are
// validated here, then the source's own reader checks its files.
#include "engine/data/sources.h"

namespace xrun::data {

const char* split_name(Split split) { return split == Split::train ? "train" : "test"; }

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
