// tests/checkpoint/truncated_test.cpp: a checkpoint cut short (a copy still
// in progress, a full disk outside xrun's atomic writer) is reported as
// truncated, with the size its header promises and the size found, whether
// the cut falls in the data or in the header itself. (It used to read as a
// malformed file, which `xrun run` reported as "not an xrun checkpoint".)
#include "catch2_compat.h"

#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/checkpoint/safetensors.h"

using xrun::SafetensorsFile;
using xrun_test::ScratchDir;

TEST_CASE("a truncated checkpoint says so: expected N bytes, found M", "[checkpoint][truncated]") {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> a(100, 1.0f), b(28, 2.0f);
  xrun::write_safetensors(path,
                          {{"a", "F32", {100}, a.data(), 400}, {"b", "F32", {28}, b.data(), 112}},
                          {{"xrun.step", "7"}});
  const std::string whole = xrun_test::read_bytes(path);
  const size_t size = whole.size();
  REQUIRE_NOTHROW(SafetensorsFile::open(path));

  // Cut in the data section: the header is whole and promises `size` bytes.
  for (size_t keep : {size - 1, size - 112, size - 300}) {
    xrun_test::write_bytes(path, whole.substr(0, keep));
    INFO("kept " << keep << " of " << size << " bytes");
    CHECK_THROWS_WITH(SafetensorsFile::open(path),
                      Catch::Contains(path) && Catch::Contains("truncated") &&
                          Catch::Contains("expected " + std::to_string(size) + " bytes") &&
                          Catch::Contains("found " + std::to_string(keep)));
  }
  // Cut in the header: its length field promises at least 8 + that length.
  uint64_t header_len = 0;
  std::memcpy(&header_len, whole.data(), 8);
  xrun_test::write_bytes(path, whole.substr(0, 20));
  CHECK_THROWS_WITH(SafetensorsFile::open(path),
                    Catch::Contains("truncated") &&
                        Catch::Contains("expected at least " + std::to_string(8 + header_len) +
                                        " bytes") &&
                        Catch::Contains("found 20"));
}
