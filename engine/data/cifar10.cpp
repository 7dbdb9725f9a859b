// engine/data/cifar10.cpp: the official CIFAR-10 binary files
// (data_batch_1..5.bin for training, test_batch.bin for testing). Each file
// is 10000 records of 1 label byte + 3072 pixel bytes (R, G, B planes of
// 32x32). The split's files are read whole and checked when opened; get()
// copies (or resizes) a record into the run's image size.
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "engine/data/file_read.h"
#include "engine/data/image_ops.h"
#include "engine/data/sources.h"

namespace xrun::data {

namespace {

namespace fs = std::filesystem;

constexpr int kSide = 32;
constexpr int kPixels = 3 * kSide * kSide;      // 3072
constexpr int64_t kRecord = 1 + kPixels;        // 3073
constexpr int64_t kRecordsPerFile = 10000;
constexpr int64_t kFileBytes = kRecord * kRecordsPerFile;  // 30730000
constexpr const char* kUrl = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";

std::vector<std::string> split_files(Split split) {
  if (split == Split::test) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

std::string where_to_get(const std::string& dir) {
  return "cifar10 expects data_batch_1.bin ... data_batch_5.bin and test_batch.bin in '" + dir +
         "': download " + kUrl + " and extract it so that this directory holds them "
         "(the archive's folder cifar-10-batches-bin)";
}

class Cifar10 final : public Dataset {
 public:
  Cifar10(const DataConfig& cfg, Split split, const std::string& dir, int64_t limit)
      : split_(split), dir_(dir), side_(cfg.image_size) {
    if (cfg.channels != 3)
      throw DataError("cifar10 has 3 channels (RGB) but data.channels = " +
                      std::to_string(cfg.channels));
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      const char* what = fs::exists(dir, ec) ? "is not a directory" : "does not exist";
      throw DataError("cifar10: directory '" + dir + "' " + what + "; " + where_to_get(dir));
    }
    const std::vector<std::string> names = split_files(split);
    std::string missing;
    for (const auto& name : names)
      if (!fs::exists(fs::path(dir) / name, ec)) missing += (missing.empty() ? "" : ", ") + name;
    if (!missing.empty())
      throw DataError("cifar10: missing " + missing + " in '" + dir + "'; " + where_to_get(dir));

    records_.reserve(names.size() * kFileBytes);
    for (const auto& name : names) read_file(fs::path(dir) / name);
    total_ = static_cast<int64_t>(records_.size() / kRecord);
    size_ = limit > 0 ? std::min(limit, total_) : total_;
    plan_ = make_resize_plan(kSide, kSide, side_, side_);
  }

  int64_t size() const override { return size_; }
  int channels() const override { return 3; }
  int height() const override { return side_; }
  int width() const override { return side_; }
  int num_classes() const override { return 10; }

  void get(int64_t index, uint8_t* chw, int32_t* label) const override {
    if (index < 0 || index >= size_)
      throw std::out_of_range("cifar10: sample " + std::to_string(index) + " of " +
                              std::to_string(size_));
    const uint8_t* rec = records_.data() + index * kRecord;
    *label = rec[0];
    place_image(plan_, rec + 1, 3, chw, 3);
  }

  std::string describe() const override {
    std::string s = std::string("cifar10 ") + split_name(split_) + ": " + std::to_string(size_) +
                    " images 3x" + std::to_string(side_) + "x" + std::to_string(side_);
    if (size_ < total_) s += " (first " + std::to_string(size_) + " of " + std::to_string(total_) + ")";
    if (side_ != kSide) s += " resized from 32x32";
    return s + " from " + dir_;
  }

 private:
  void read_file(const fs::path& file) {
    const std::string path = file.string();
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(fs::file_size(file, ec));
    if (ec) throw DataError(path + ": cannot read its size (" + ec.message() + ")");
    if (bytes != kFileBytes) {
      std::string what = bytes % kRecord != 0
                             ? "truncated or corrupt: size is not a whole number of 3073-byte records"
                             : "holds " + std::to_string(bytes / kRecord) + " records, expected 10000";
      throw DataError(path + ": " + what + " (" + std::to_string(bytes) + " bytes, expected " +
                      std::to_string(kFileBytes) + " = 10000 records of 3073 bytes); " +
                      "download it again from " + kUrl);
    }
    std::vector<uint8_t> data = read_file_bytes(path);
    if (static_cast<int64_t>(data.size()) != kFileBytes)
      throw DataError(path + ": changed size while being read");
    for (int64_t r = 0; r < kRecordsPerFile; ++r)
      if (data[r * kRecord] > 9)
        throw DataError(path + ": record " + std::to_string(r) + " has label " +
                        std::to_string(data[r * kRecord]) + " (CIFAR-10 labels are 0..9)");
    records_.insert(records_.end(), data.begin(), data.end());
  }

  Split split_;
  std::string dir_;
  int side_;
  int64_t total_ = 0, size_ = 0;
  std::vector<uint8_t> records_;  // the split's files, concatenated
  ResizePlan plan_;
};

}  // namespace

std::unique_ptr<Dataset> open_cifar10(const DataConfig& cfg, Split split, const std::string& dir,
                                      int64_t limit) {
  return std::make_unique<Cifar10>(cfg, split, dir, limit);
}

}  // namespace xrun::data
