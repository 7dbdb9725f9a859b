// engine/data/idx.cpp: MNIST-format IDX files (MNIST, Fashion-MNIST, ...):
// train-images-idx3-ubyte + train-labels-idx1-ubyte and the t10k-* pair,
// each plain or gzip-compressed (recognised by its magic bytes; the name is
// tried with and without ".gz"). Headers, lengths, counts and labels are
// checked at open; get() places the gray image into the run's size and
// channel count (bilinear resize, gray replicated to 3 channels).
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "engine/data/file_read.h"
#include "engine/data/image_ops.h"
#include "engine/data/sources.h"

namespace xrun::data {

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct IdxFile {
  std::string path;            // the file actually read
  std::vector<uint8_t> bytes;  // decompressed
  bool gzipped = false;
};

// Bytes the header of `head` (a file's first bytes) says the whole file has,
// saturating instead of wrapping; 0 when the magic or the header is missing.
uint64_t size_from_header(const std::vector<uint8_t>& head, uint32_t magic) {
  const size_t ndims = magic & 0xff;
  const size_t header = 4 + 4 * ndims;
  if (head.size() < header || be32(head.data()) != magic) return 0;
  constexpr uint64_t kHuge = uint64_t{1} << 62;
  uint64_t payload = 1;
  for (size_t i = 0; i < ndims; ++i) {
    const uint32_t d = be32(head.data() + 4 + 4 * i);
    payload = d != 0 && payload > kHuge / d ? kHuge : payload * d;
  }
  return header + payload;
}

// Reads `dir/name` or `dir/name.gz`, whichever exists, gunzipping by magic.
// A gzipped file is inflated only as far as its header says it reaches (one
// byte more, to see that it is too long), and a header claiming more than
// deflate can expand the file to is refused before any allocation.
IdxFile read_idx(const std::string& dir, const std::string& name, uint32_t magic) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    const fs::path p = fs::path(dir) / candidate;
    if (!fs::is_regular_file(p, ec)) continue;
    IdxFile f{p.string(), read_file_bytes(p.string())};
    if (is_gzip(f.bytes)) {
      f.gzipped = true;
      const size_t header = 4 + 4 * (magic & 0xff);
      std::vector<uint8_t> head = gunzip(f.bytes, f.path, header);
      const uint64_t expected = size_from_header(head, magic);
      if (expected == 0) {  // no valid header: parse_header says what is wrong
        f.bytes = std::move(head);
        return f;
      }
      constexpr uint64_t kDeflateMaxRatio = 1032;
      if (expected > f.bytes.size() * kDeflateMaxRatio + header)
        throw DataError(f.path + ": the IDX header (offset 4) gives dimensions of " +
                        std::to_string(expected) + " bytes, more than a gzip file of " +
                        std::to_string(f.bytes.size()) + " bytes can hold (corrupt or hostile file)");
      f.bytes = gunzip(f.bytes, f.path, static_cast<size_t>(expected));
    }
    return f;
  }
  throw DataError("idx: missing " + (fs::path(dir) / name).string() + " (or " + name +
                  ".gz); the directory should hold train-images-idx3-ubyte, "
                  "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte "
                  "(plain or .gz), e.g. Fashion-MNIST from the Debian/Ubuntu package "
                  "dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)");
}

// Checks the magic and returns the header's dimensions.
std::vector<uint32_t> parse_header(const IdxFile& f, uint32_t magic, const char* kind) {
  const size_t ndims = magic & 0xff;
  const size_t header = 4 + 4 * ndims;
  if (f.bytes.size() < 4 || be32(f.bytes.data()) != magic)
    throw DataError(f.path + ": not an IDX " + kind + " file: magic " +
                    (f.bytes.size() < 4 ? std::string("missing (file shorter than 4 bytes)")
                                        : hex32(be32(f.bytes.data()))) +
                    ", expected " + hex32(magic) + " (unsigned bytes, " +
                    std::to_string(ndims) + " dimension" + (ndims > 1 ? "s" : "") + ")");
  if (f.bytes.size() < header)
    throw DataError(f.path + ": truncated IDX header (" + std::to_string(f.bytes.size()) +
                    " bytes, the header alone is " + std::to_string(header) + ")");
  std::vector<uint32_t> dims(ndims);
  uint64_t payload = 1;
  for (size_t i = 0; i < ndims; ++i) {
    dims[i] = be32(f.bytes.data() + 4 + 4 * i);
    constexpr uint64_t kHuge = uint64_t{1} << 62;  // saturate rather than wrap around
    payload = dims[i] != 0 && payload > kHuge / dims[i] ? kHuge : payload * dims[i];
  }
  const uint64_t expected = header + payload;
  if (f.bytes.size() != expected)
    throw DataError(f.path + ": " + (f.bytes.size() < expected ? "truncated" : "too long") +
                    ": " + std::to_string(f.bytes.size()) + " bytes" +
                    (f.gzipped ? " (after decompression)" : "") + ", expected " +
                    std::to_string(expected) + " for the header's dimensions");
  return dims;
}

class Idx final : public Dataset {
 public:
  Idx(const DataConfig& cfg, Split split, const std::string& dir, int64_t limit)
      : split_(split), dir_(dir), side_(cfg.image_size), channels_(cfg.channels),
        classes_(cfg.num_classes > 0 ? cfg.num_classes : 10) {
    if (channels_ != 1 && channels_ != 3)
      throw DataError("idx images are gray: data.channels must be 1 or 3 (gray replicated), not " +
                      std::to_string(channels_));
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw DataError("idx: data.path '" + dir + "' " +
                      (fs::exists(dir, ec) ? "is a file, not a directory" : "does not exist") +
                      "; it should be a directory holding "
                      "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte "
                      "and t10k-labels-idx1-ubyte (plain or .gz), e.g. Fashion-MNIST from the "
                      "Debian/Ubuntu package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)");
    const std::string prefix = split == Split::train ? "train" : "t10k";
    IdxFile images = read_idx(dir, prefix + "-images-idx3-ubyte", kImagesMagic);
    IdxFile labels = read_idx(dir, prefix + "-labels-idx1-ubyte", kLabelsMagic);
    const auto idims = parse_header(images, kImagesMagic, "images");
    const auto ldims = parse_header(labels, kLabelsMagic, "labels");
    if (idims[0] != ldims[0])
      throw DataError(images.path + " holds " + std::to_string(idims[0]) + " images but " +
                      labels.path + " holds " + std::to_string(ldims[0]) + " labels");
    // A side must fit the int sizes of the resize plan; with zero images a
    // header can claim any size without the file holding a byte of it.
    constexpr uint32_t kMaxSide = 65535;
    if (idims[1] == 0 || idims[2] == 0 || idims[1] > kMaxSide || idims[2] > kMaxSide)
      throw DataError(images.path + ": images of size " + std::to_string(idims[1]) + "x" +
                      std::to_string(idims[2]) + " (each side must be 1.." +
                      std::to_string(kMaxSide) + ")");
    rows_ = static_cast<int>(idims[1]);
    cols_ = static_cast<int>(idims[2]);
    total_ = idims[0];
    for (int64_t i = 0; i < total_; ++i)
      if (labels.bytes[8 + i] >= classes_)
        throw DataError(labels.path + ": label " + std::to_string(labels.bytes[8 + i]) +
                        " of record " + std::to_string(i) + " is not below num_classes = " +
                        std::to_string(classes_));
    size_ = limit > 0 ? std::min(limit, total_) : total_;
    pixels_.assign(images.bytes.begin() + 16,
                   images.bytes.begin() + 16 + size_ * rows_ * cols_);
    labels_.assign(labels.bytes.begin() + 8, labels.bytes.begin() + 8 + size_);
    plan_ = make_resize_plan(rows_, cols_, side_, side_);
  }

  int64_t size() const override { return size_; }
  int channels() const override { return channels_; }
  int height() const override { return side_; }
  int width() const override { return side_; }
  int num_classes() const override { return classes_; }

  void get(int64_t index, uint8_t* chw, int32_t* label) const override {
    if (index < 0 || index >= size_)
      throw std::out_of_range("idx: sample " + std::to_string(index) + " of " +
                              std::to_string(size_));
    *label = labels_[index];
    place_image(plan_, pixels_.data() + index * rows_ * cols_, 1, chw, channels_);
  }

  std::string describe() const override {
    std::string s = std::string("idx ") + split_name(split_) + ": " + std::to_string(size_) +
                    " images " + std::to_string(channels_) + "x" + std::to_string(side_) + "x" +
                    std::to_string(side_);
    if (size_ < total_) s += " (first " + std::to_string(size_) + " of " + std::to_string(total_) + ")";
    if (side_ != rows_ || side_ != cols_ || channels_ != 1)
      s += " from " + std::to_string(rows_) + "x" + std::to_string(cols_) + " gray";
    return s + " in " + dir_;
  }

 private:
  Split split_;
  std::string dir_;
  int side_, channels_, classes_;
  int rows_ = 0, cols_ = 0;
  int64_t total_ = 0, size_ = 0;
  std::vector<uint8_t> pixels_;  // size_ images of rows_ x cols_, as stored
  std::vector<uint8_t> labels_;
  ResizePlan plan_;
};

}  // namespace

std::unique_ptr<Dataset> open_idx(const DataConfig& cfg, Split split, const std::string& dir,
                                  int64_t limit) {
  return std::make_unique<Idx>(cfg, split, dir, limit);
}

}  // namespace xrun::data
