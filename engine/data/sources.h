// engine/data/sources.h: the constructors open_dataset dispatches to, one
// per source format (cifar10.cpp, idx.cpp, synthetic.cpp). Each checks its
// own settings and files and throws DataError. `limit` is the resolved
// cfg.limit or cfg.test_limit for the split (0 = all).
#pragma once

#include <memory>
#include <string>

#include "engine/data/dataset.h"

namespace xrun::data {

const char* split_name(Split split);

std::unique_ptr<Dataset> open_cifar10(const DataConfig& cfg, Split split, const std::string& dir,
                                      int64_t limit);
std::unique_ptr<Dataset> open_idx(const DataConfig& cfg, Split split, const std::string& dir,
                                  int64_t limit);
std::unique_ptr<Dataset> open_synthetic(const DataConfig& cfg, Split split, uint64_t seed,
                                        int64_t limit);

}  // namespace xrun::data
