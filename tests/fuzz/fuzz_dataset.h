// tests/fuzz/fuzz_dataset.h: what the dataset targets (fuzz_idx,
// fuzz_cifar10) do once their files are written: open the split, describe
// it and read its first, second and last samples. DataError is expected;
// any other exception, or a label outside the classes, is a finding.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <vector>

#include "engine/data/dataset.h"
#include "fuzz_util.h"

namespace xrun_fuzz {

inline void open_and_read(const char* target, const xrun::DataConfig& cfg, bool test) {
  try {
    auto ds = xrun::data::open_dataset(cfg, test ? xrun::data::Split::test : xrun::data::Split::train, 1);
    (void)ds->describe();
    std::vector<uint8_t> chw(static_cast<size_t>(ds->channels()) * ds->height() * ds->width());
    int32_t label = 0;
    for (int64_t i : {int64_t{0}, int64_t{1}, ds->size() - 1})
      if (i >= 0 && i < ds->size()) {
        ds->get(i, chw.data(), &label);
        if (label < 0 || label >= ds->num_classes()) std::abort();
      }
  } catch (const xrun::data::DataError& e) {
    expected(target, e.what());  // a missing, truncated or malformed file
  } catch (const std::exception& e) {
    unexpected(target, e.what());
  }
}

}  // namespace xrun_fuzz
