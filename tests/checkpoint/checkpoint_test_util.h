// tests/checkpoint/checkpoint_test_util.h: what the checkpoint tests add to
// tests/test_util.h: hand-made safetensors files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "test_util.h"

namespace xrun_test {

// A safetensors file from a raw header string (not padded) and data bytes.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace xrun_test
