// tests/data/data_test_util.h: helpers the data tests share (configs) on top
// of tests/test_util.h (scratch directories, byte files).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/config.h"
#include "test_util.h"

namespace xrun::data::testing {

using TempDir = xrun_test::ScratchDir;

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  xrun_test::write_bytes(path, bytes.data(), bytes.size());
}

inline xrun::DataConfig config(const std::string& source, const std::string& path, int image_size,
                         int channels) {
  xrun::DataConfig cfg;
  cfg.source = source;
  cfg.path = path;
  cfg.image_size = image_size;
  cfg.channels = channels;
  return cfg;
}

}  // namespace xrun::data::testing
