// tests/fuzz/fuzz_idx.cpp: libFuzzer target for the IDX reader
// (engine/data/idx.cpp, engine/data/file_read.cpp): the input becomes an
// images file and a labels file in a scratch directory, optionally gzipped,
// open_dataset opens the split and get() reads the first and last samples.
//
// Input layout:
//   byte 0      flags: bit 0 gzip the images, bit 1 gzip the labels,
//               bit 2 test split (t10k-*), bit 3 three channels (else one),
//               bits 4-5 image size (28, 32, 8, 1), bit 6 name the gzipped
//               files *.gz, bit 7 data.limit = 2
//   bytes 1-2   n: length of the labels file, little-endian
//   n bytes     the labels file (train-labels-idx1-ubyte)
//   the rest    the images file (train-images-idx3-ubyte)
// A bad file must end in a DataError; any other exception, a crash, an
// allocation beyond -rss_limit_mb or a sanitizer report is a bug.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "fuzz_dataset.h"
#include "fuzz_util.h"

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&zs, size) + 32);
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void write_part(const std::string& dir, const std::string& name, const uint8_t* data, size_t size,
                bool gzipped, bool gz_name) {
  const std::string path = dir + "/" + name + (gzipped && gz_name ? ".gz" : "");
  if (gzipped) {
    const std::vector<uint8_t> gz = gzip(data, size);
    xrun_fuzz::write_file(path, gz.data(), gz.size());
  } else {
    xrun_fuzz::write_file(path, data, size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t flags = data[0];
  const size_t labels_len = std::min<size_t>(data[1] | size_t{data[2]} << 8, size - 3);
  const uint8_t* labels = data + 3;
  const uint8_t* images = labels + labels_len;
  const size_t images_len = size - 3 - labels_len;

  const std::string dir = xrun_fuzz::scratch_file("idx");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directory(dir);
  const bool test = flags & 4;
  const std::string prefix = test ? "t10k" : "train";
  write_part(dir, prefix + "-images-idx3-ubyte", images, images_len, flags & 1, flags & 64);
  write_part(dir, prefix + "-labels-idx1-ubyte", labels, labels_len, flags & 2, flags & 64);

  xrun::DataConfig cfg;
  cfg.source = "idx";
  cfg.path = dir;
  cfg.channels = flags & 8 ? 3 : 1;
  static constexpr int kSizes[] = {28, 32, 8, 1};
  cfg.image_size = kSizes[(flags >> 4) & 3];
  cfg.num_classes = 10;
  cfg.limit = cfg.test_limit = flags & 128 ? 2 : 0;
  xrun_fuzz::open_and_read("idx", cfg, test);
  return 0;
}
