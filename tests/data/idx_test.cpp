// tests/data/idx_test.cpp: IDX files (plain and gzip, recognised by content
// not name) written here and read back exactly; wrong magic, count mismatch,
// truncation and bad labels rejected; and the real Fashion-MNIST from the
// Debian package dataset-fashion-mnist.
#include "catch2_compat.h"
#include <zlib.h>

#include <array>
#include <filesystem>

#include "data_test_util.h"
#include "engine/data/dataset.h"
#include "engine/data/image_ops.h"

using namespace xrun::data;
using namespace xrun::data::testing;
using Catch::Contains;

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

uint8_t pixel(int image, int byte) { return static_cast<uint8_t>(image * 31 + byte * 5 + 3); }

std::vector<uint8_t> images_file(int n, int rows, int cols, uint32_t magic = 0x00000803) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  put_be32(out, n);
  put_be32(out, rows);
  put_be32(out, cols);
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < rows * cols; ++b) out.push_back(pixel(i, b));
  return out;
}

std::vector<uint8_t> labels_file(int n) {
  std::vector<uint8_t> out;
  put_be32(out, 0x00000801);
  put_be32(out, n);
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>((i * 7) % 10));
  return out;
}

void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

void check_exact(const Dataset& ds, int n, int rows, int cols) {
  REQUIRE(ds.size() == n);
  std::vector<uint8_t> img(rows * cols);
  for (int i = 0; i < n; ++i) {
    int32_t lab = -1;
    ds.get(i, img.data(), &lab);
    REQUIRE(lab == (i * 7) % 10);
    for (int b = 0; b < rows * cols; ++b) REQUIRE(img[b] == pixel(i, b));
  }
}

}  // namespace

TEST_CASE("idx reads plain and gzip files exactly", "[data][idx]") {
  TempDir dir;
  auto cfg = config("idx", dir.str(), 6, 1);
  // Train: gzip under the .gz names. Test: plain content.
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), images_file(5, 6, 6));
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), labels_file(5));
  write_bytes(dir.file("t10k-images-idx3-ubyte"), images_file(3, 6, 6));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), labels_file(3));
  check_exact(*open_dataset(cfg, Split::train, 0), 5, 6, 6);
  check_exact(*open_dataset(cfg, Split::test, 0), 3, 6, 6);
  CHECK(open_dataset(cfg, Split::test, 0)->describe() == "idx test: 3 images 1x6x6 in " + dir.str());

  SECTION("content decides, not the name") {
    TempDir other;
    cfg.path = other.str();
    write_gzip(other.file("t10k-images-idx3-ubyte"), images_file(3, 6, 6));  // gzip, plain name
    write_bytes(other.file("t10k-labels-idx1-ubyte.gz"), labels_file(3));     // plain, .gz name
    check_exact(*open_dataset(cfg, Split::test, 0), 3, 6, 6);
  }
  SECTION("limit, resize and gray replicated to 3 channels") {
    cfg.limit = 2;
    cfg.image_size = 9;
    cfg.channels = 3;
    auto ds = open_dataset(cfg, Split::train, 0);
    CHECK(ds->size() == 2);
    CHECK(ds->channels() == 3);
    CHECK_THAT(ds->describe(), Contains("first 2 of 5") && Contains("from 6x6 gray"));
    std::vector<uint8_t> got(3 * 81), want(81);
    int32_t lab;
    ds->get(1, got.data(), &lab);
    const auto file = images_file(5, 6, 6);
    resize_bilinear(make_resize_plan(6, 6, 9, 9), file.data() + 16 + 36, want.data());
    for (int c = 0; c < 3; ++c)
      CHECK(std::vector<uint8_t>(got.begin() + 81 * c, got.begin() + 81 * (c + 1)) == want);
  }
  SECTION("channels must be 1 or 3") {
    cfg.channels = 2;
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0), Contains("must be 1 or 3"));
  }
}

TEST_CASE("idx rejects malformed files with the file and the fault", "[data][idx]") {
  TempDir dir;
  auto cfg = config("idx", dir.str(), 4, 1);
  const std::string images = dir.file("t10k-images-idx3-ubyte");
  const std::string labels = dir.file("t10k-labels-idx1-ubyte");
  write_bytes(labels, labels_file(4));

  SECTION("wrong magic") {
    write_bytes(images, images_file(4, 4, 4, 0x00000804));
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images) && Contains("magic 0x00000804, expected 0x00000803"));
  }
  SECTION("labels file with the images magic") {
    write_bytes(images, images_file(4, 4, 4));
    write_bytes(labels, images_file(4, 4, 4));
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(labels) && Contains("expected 0x00000801"));
  }
  SECTION("count mismatch") {
    write_bytes(images, images_file(5, 4, 4));
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains("holds 5 images") && Contains("holds 4 labels"));
  }
  SECTION("truncated plain file") {
    auto bytes = images_file(4, 4, 4);
    bytes.resize(bytes.size() - 3);
    write_bytes(images, bytes);
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images) && Contains("truncated") && Contains("77 bytes") &&
                          Contains("expected 80"));
  }
  SECTION("truncated header") {
    write_bytes(images, {0, 0, 8, 3, 0, 0});
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images) && Contains("truncated IDX header"));
  }
  SECTION("truncated gzip stream") {
    write_gzip(images + ".gz", images_file(4, 4, 4));
    auto gz = std::vector<uint8_t>(std::filesystem::file_size(images + ".gz"));
    std::ifstream(images + ".gz", std::ios::binary).read(reinterpret_cast<char*>(gz.data()), gz.size());
    gz.resize(gz.size() / 2);
    write_bytes(images + ".gz", gz);
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images + ".gz") && Contains("gzip data ends early"));
  }
  SECTION("label not below num_classes") {
    write_bytes(images, images_file(4, 4, 4));
    auto bytes = labels_file(4);
    bytes[8 + 2] = 12;
    write_bytes(labels, bytes);
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(labels) && Contains("label 12 of record 2"));
    cfg.num_classes = 13;  // e.g. a dataset with more classes
    CHECK(open_dataset(cfg, Split::test, 0)->num_classes() == 13);
  }
  SECTION("a gzip bomb: inflated only as far as the header says, one byte past it") {
    // The header says 4 images of 4x4 (80 bytes); the stream then goes on
    // with 64 MiB of zeros. The reader stops at 81 bytes instead of holding
    // them all.
    auto bytes = images_file(4, 4, 4);
    bytes.resize(bytes.size() + (size_t{64} << 20), 0);
    write_gzip(images + ".gz", bytes);
    CHECK(std::filesystem::file_size(images + ".gz") < (size_t{1} << 20));
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images + ".gz") && Contains("too long: 81 bytes (after decompression)") &&
                          Contains("expected 80"));
  }
  SECTION("a header claiming more than its gzip file can hold is refused before inflating") {
    auto header = images_file(0, 4, 4);
    header[4] = header[5] = header[6] = header[7] = 0xff;  // 4294967295 images
    write_gzip(images + ".gz", header);
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(images + ".gz") && Contains("the IDX header (offset 4)") &&
                          Contains("68719476736 bytes") && Contains("more than a gzip file of"));
  }
  SECTION("data.path names a file") {
    cfg.path = labels;
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(labels) && Contains("is a file, not a directory"));
  }
  SECTION("missing file and directory") {
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains("missing " + images) && Contains("dataset-fashion-mnist"));
    cfg.path = dir.file("nowhere");
    CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0),
                      Contains(dir.file("nowhere")) && Contains("does not exist"));
  }
}

TEST_CASE("the real Fashion-MNIST from dataset-fashion-mnist", "[data][idx][fashion-mnist]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dir))
    FAIL(dir << " is missing: install the Debian/Ubuntu package dataset-fashion-mnist "
                "(apt-get install dataset-fashion-mnist)");
  auto cfg = config("idx", "", 28, 1);  // empty path: the source's default
  auto train = open_dataset(cfg, Split::train, 0);
  auto test = open_dataset(cfg, Split::test, 0);
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  CHECK(train->describe() == "idx train: 60000 images 1x28x28 in " + dir);
  std::vector<uint8_t> img(28 * 28);
  for (auto* ds : {train.get(), test.get()}) {
    std::array<int64_t, 10> per_class{};
    int64_t nonzero = 0;
    for (int64_t i = 0; i < ds->size(); ++i) {
      int32_t lab = -1;
      ds->get(i, img.data(), &lab);
      REQUIRE(lab >= 0);
      REQUIRE(lab <= 9);
      ++per_class[lab];
      if (i < 100)
        for (uint8_t v : img) nonzero += v != 0;
    }
    for (int64_t n : per_class) CHECK(n == ds->size() / 10);  // both splits are balanced
    CHECK(nonzero > 100 * 28 * 28 / 4);                       // real images, not blanks
  }
}
