// tests/data/idx_hostile_test.cpp: IDX headers found by fuzzing (issue #10,
// tests/fuzz/regressions/idx/): a header of zero images may claim any image
// size without the file holding a byte of it; sides that do not fit the
// reader's int sizes must be refused as a DataError, not reach the resize
// plan as negative numbers.
#include "catch2_compat.h"

#include "data_test_util.h"
#include "engine/data/dataset.h"

using namespace xrun::data;
using namespace xrun::data::testing;
using Catch::Contains;

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> header(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words) put_be32(out, w);
  return out;
}

}  // namespace

TEST_CASE("idx refuses image sides that do not fit, even with zero images", "[data][idx][hostile]") {
  TempDir dir;
  const auto cfg = config("idx", dir.str(), 28, 1);
  const std::string images = dir.file("t10k-images-idx3-ubyte");
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), header({0x801, 0}));
  // The fuzzer's input: 0 images of 67764252 x 4294967271 (-25 as an int).
  for (auto [rows, cols] : {std::pair<uint32_t, uint32_t>{0x040a001c, 0xffffffe7},
                            {0x80000000u, 1},
                            {1, 65536}}) {
    write_bytes(images, header({0x803, 0, rows, cols}));
    CHECK_THROWS_AS(open_dataset(cfg, Split::test, 0), DataError);
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images) && Contains("images of size " + std::to_string(rows) + "x" +
                                                   std::to_string(cols)) &&
                          Contains("1..65535"));
  }
  // The largest side allowed, with zero images, is an empty dataset.
  write_bytes(images, header({0x803, 0, 65535, 65535}));
  CHECK(open_dataset(cfg, Split::test, 0)->size() == 0);
}
