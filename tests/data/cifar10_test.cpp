// tests/data/cifar10_test.cpp: CIFAR-10 binary files written here with known
// pixels and labels and read back exactly (both splits, limit, resize), and
// every file problem rejected with a message naming the file and the fault.
#include "catch2_compat.h"

#include <filesystem>

#include "data_test_util.h"
#include "engine/data/dataset.h"
#include "engine/data/image_ops.h"

using namespace xrun::data;
using namespace xrun::data::testing;
using Catch::Contains;

namespace {

constexpr int kRecord = 3073;
constexpr int kRecords = 10000;

uint8_t pixel(int file, int record, int byte) {
  return static_cast<uint8_t>(record * 7 + byte * 13 + file * 29 + (record >> 8));
}
uint8_t label(int file, int record) { return static_cast<uint8_t>((record * 3 + file) % 10); }

std::vector<uint8_t> cifar_file(int file, int records = kRecords) {
  std::vector<uint8_t> bytes(static_cast<size_t>(records) * kRecord);
  for (int r = 0; r < records; ++r) {
    uint8_t* rec = bytes.data() + static_cast<size_t>(r) * kRecord;
    rec[0] = label(file, r);
    for (int b = 0; b < 3072; ++b) rec[1 + b] = pixel(file, r, b);
  }
  return bytes;
}

const char* kTrain[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                        "data_batch_4.bin", "data_batch_5.bin"};

// Checks sample `index` against the file / record it came from.
void check_sample(const Dataset& ds, int64_t index, int file, int record) {
  std::vector<uint8_t> img(3072);
  int32_t lab = -1;
  ds.get(index, img.data(), &lab);
  REQUIRE(lab == label(file, record));
  for (int b = 0; b < 3072; ++b) REQUIRE(img[b] == pixel(file, record, b));
}

}  // namespace

TEST_CASE("cifar10 reads both splits exactly", "[data][cifar10]") {
  TempDir dir;
  for (int f = 0; f < 5; ++f) write_bytes(dir.file(kTrain[f]), cifar_file(f));
  write_bytes(dir.file("test_batch.bin"), cifar_file(5));
  auto cfg = config("cifar10", dir.str(), 32, 3);

  auto train = open_dataset(cfg, Split::train, 0);
  REQUIRE(train->size() == 50000);
  CHECK(train->channels() == 3);
  CHECK(train->height() == 32);
  CHECK(train->width() == 32);
  CHECK(train->num_classes() == 10);
  CHECK(train->describe() == "cifar10 train: 50000 images 3x32x32 from " + dir.str());
  for (int64_t i : {0, 1, 9999, 10000, 23456, 49999}) check_sample(*train, i, i / 10000, i % 10000);

  auto test = open_dataset(cfg, Split::test, 0);
  REQUIRE(test->size() == 10000);
  for (int64_t i : {0, 5000, 9999}) check_sample(*test, i, 5, static_cast<int>(i));

  SECTION("test_limit keeps the first samples") {
    cfg.test_limit = 100;
    auto limited = open_dataset(cfg, Split::test, 0);
    CHECK(limited->size() == 100);
    check_sample(*limited, 99, 5, 99);
    CHECK_THAT(limited->describe(), Contains("first 100 of 10000"));
    std::vector<uint8_t> img(3072);
    int32_t lab;
    CHECK_THROWS_AS(limited->get(100, img.data(), &lab), std::out_of_range);
  }
  SECTION("a larger image_size resizes each plane bilinearly") {
    cfg.image_size = 48;
    auto big = open_dataset(cfg, Split::test, 0);
    CHECK(big->height() == 48);
    std::vector<uint8_t> got(3 * 48 * 48), want(3 * 48 * 48);
    int32_t lab;
    big->get(7, got.data(), &lab);
    const auto rec = cifar_file(5, 8);
    place_image(make_resize_plan(32, 32, 48, 48), rec.data() + 7 * kRecord + 1, 3, want.data(), 3);
    CHECK(got == want);
  }
}

TEST_CASE("cifar10 rejects missing, truncated and malformed files", "[data][cifar10]") {
  TempDir dir;
  auto cfg = config("cifar10", dir.str(), 32, 3);

  SECTION("missing directory") {
    cfg.path = dir.file("nowhere");
    REQUIRE_THROWS_AS(open_dataset(cfg, Split::train, 0), DataError);
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::train, 0),
                        Contains(dir.file("nowhere")) && Contains("does not exist") &&
                            Contains("data_batch_1.bin") &&
                            Contains("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"));
  }
  SECTION("missing file") {
    for (int f : {0, 1, 3, 4}) write_bytes(dir.file(kTrain[f]), {});
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::train, 0),
                        Contains("missing data_batch_3.bin") && Contains(dir.str()) &&
                            Contains("cifar-10-binary.tar.gz"));
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::test, 0), Contains("missing test_batch.bin"));
  }
  SECTION("truncated file") {
    auto bytes = cifar_file(5);
    bytes.resize(bytes.size() - 100);
    write_bytes(dir.file("test_batch.bin"), bytes);
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                        Contains(dir.file("test_batch.bin")) && Contains("truncated") &&
                            Contains("30729900 bytes, expected 30730000"));
  }
  SECTION("whole records but not 10000 of them") {
    write_bytes(dir.file("test_batch.bin"), cifar_file(5, 9999));
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                        Contains(dir.file("test_batch.bin")) &&
                            Contains("holds 9999 records, expected 10000") &&
                            Contains("30726927 bytes"));
  }
  SECTION("label out of range") {
    auto bytes = cifar_file(5);
    bytes[1234 * kRecord] = 10;
    write_bytes(dir.file("test_batch.bin"), bytes);
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                        Contains(dir.file("test_batch.bin")) &&
                            Contains("record 1234 has label 10"));
  }
  SECTION("channels other than 3") {
    write_bytes(dir.file("test_batch.bin"), cifar_file(5, 1));
    cfg.channels = 1;
    REQUIRE_THROWS_WITH(open_dataset(cfg, Split::test, 0), Contains("cifar10 has 3 channels"));
  }
}
