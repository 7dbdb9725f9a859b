// tests/fuzz/fuzz_cifar10.cpp: libFuzzer target for the CIFAR-10 reader
// (engine/data/cifar10.cpp). A split's files must be exactly 30730000
// bytes (10000 records of 1 label byte + 3072 pixels), so the input is
// placed at the start of a sparse file of that size (the records after it
// read as zeros: label 0, black) and also as the last record's bytes, or
// written as it is to exercise the size checks cheaply.
//
// Input layout:
//   byte 0      flags: bits 0-1 mode: 0 a full test_batch.bin (sparse, input
//               at the start and at the end), 1 test_batch.bin holding just
//               the input, 2 a test_batch.bin of 30730000 + d bytes (d =
//               (int8) byte 1 when odd, else (int8) byte 1 / 2 records of
//               3073 bytes), 3 the train split's five files, file k present when
//               bit k of byte 1 is set, each holding just the input;
//               bit 2 data.channels = 1 (refused); bits 3-4 image size
//               (32, 16, 40, 1); bit 5 data.limit = 3; bit 6 data.path is a
//               file instead of a directory
//   byte 1      mode 2: size delta; mode 3: which files exist
//   the rest    record bytes
// A bad file must end in a DataError; any other exception, a crash or a
// sanitizer report is a bug.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "fuzz_dataset.h"
#include "fuzz_util.h"

namespace {

constexpr int64_t kRecord = 3073;
constexpr int64_t kFileBytes = kRecord * 10000;

// A file of `length` bytes: `data` at offset 0 and, when `tail`, again at
// the end (clipped to the file); zeros elsewhere (a hole, no disk used).
void write_sparse(const std::string& path, int64_t length, const uint8_t* data, size_t size,
                  bool tail) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, length) != 0) std::abort();
  const size_t head = std::min<size_t>(size, static_cast<size_t>(length));
  if (head > 0 && ::pwrite(fd, data, head, 0) != static_cast<ssize_t>(head)) std::abort();
  if (tail && head > 0 &&
      ::pwrite(fd, data, head, length - static_cast<int64_t>(head)) != static_cast<ssize_t>(head))
    std::abort();
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0], arg = data[1];
  const uint8_t* rest = data + 2;
  const size_t rest_len = size - 2;

  const std::string dir = xrun_fuzz::scratch_file("cifar");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  const int mode = flags & 3;
  bool test = true;
  if (flags & 64) {
    xrun_fuzz::write_file(dir, rest, rest_len);
  } else {
    std::filesystem::create_directory(dir);
    const std::string batch = dir + "/test_batch.bin";
    switch (mode) {
      case 0: write_sparse(batch, kFileBytes, rest, rest_len, true); break;
      case 1: xrun_fuzz::write_file(batch, rest, rest_len); break;
      case 2: {
        const int64_t delta = arg & 1 ? static_cast<int8_t>(arg) : static_cast<int8_t>(arg) / 2 * kRecord;
        write_sparse(batch, kFileBytes + delta, rest, rest_len, false);
        break;
      }
      case 3:
        test = false;
        for (int k = 0; k < 5; ++k)
          if (arg & (1 << k))
            xrun_fuzz::write_file(dir + "/data_batch_" + std::to_string(k + 1) + ".bin", rest,
                                  rest_len);
        break;
    }
  }

  xrun::DataConfig cfg;
  cfg.source = "cifar10";
  cfg.path = dir;
  cfg.channels = flags & 4 ? 1 : 3;
  static constexpr int kSizes[] = {32, 16, 40, 1};
  cfg.image_size = kSizes[(flags >> 3) & 3];
  cfg.limit = cfg.test_limit = flags & 32 ? 3 : 0;
  xrun_fuzz::open_and_read("cifar10", cfg, test);
  return 0;
}
