// engine/checkpoint/safetensors.h: read and write the safetensors format
// (https://github.com/huggingface/safetensors), the tensor file format that
// PyTorch, JAX and NumPy users exchange weights in.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the raw little-endian tensor
// data; offsets are relative to the start of the data section, and tensors
// cover it contiguously with no gaps or overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace xrun {

// Every failure to read or write a checkpoint; the message names the file
// and what is wrong with it.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Size of one element of a safetensors dtype ("F32", "BF16", "I64", ...) in
// bits (F4 = 4, F6_E2M3 = 6), or 0 when the dtype is unknown.
int safetensors_dtype_bits(const std::string& dtype);

// Bytes a tensor of this dtype and shape occupies. Throws CheckpointError for
// an unknown dtype, a negative dimension, an overflowing size, or a sub-byte
// dtype whose element count does not fill whole bytes.
size_t safetensors_byte_size(const std::string& dtype, std::span<const int64_t> shape);

// One tensor handed to the writer. The caller keeps `data` alive for the call;
// `bytes` must equal the dtype size times the element count.
struct TensorView {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16", "I64", "I32", "U8", ...
  std::vector<int64_t> shape;  // {} for a scalar
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes `tensors` and `metadata` to `path` atomically: the file is written
// to path + ".tmp", fsync'ed and renamed over `path`, so a crash or a failed
// write never leaves a partial file at `path` (an existing file stays intact).
// Tensors are laid out as the reference writer does: by element size,
// largest first (stable: equal sizes keep the caller's order), so every tensor
// is aligned to its element size in the file. Throws CheckpointError naming
// the file and the OS error (disk full, unwritable directory), or the invalid
// tensor (duplicate or empty name, unknown dtype, size mismatch).
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A safetensors file opened for reading: memory-mapped and fully validated on
// open. Entries point into the mapping, which lives as long as any copy of
// the SafetensorsFile (copies share it).
class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    size_t offset = 0;          // begin within the data section
    size_t bytes = 0;           // end - begin
    const std::byte* data = nullptr;  // may be unaligned in files from other writers

    int64_t numel() const;
    std::span<const std::byte> span() const { return {data, bytes}; }
    // Copies the data out (safe whatever the alignment). Throws
    // CheckpointError when sizeof(T) does not match the dtype's element size.
    template <class T>
    std::vector<T> to_vector() const {
      check_element_size(sizeof(T));
      std::vector<T> out(bytes / sizeof(T));
      copy_to(out.data(), out.size() * sizeof(T));
      return out;
    }
    // Copies the data into dst, which must hold exactly `bytes` bytes.
    void copy_to(void* dst, size_t dst_bytes) const;

   private:
    friend class SafetensorsFile;
    void check_element_size(size_t size) const;
    std::string path_;  // for error messages
  };

  // Opens and validates `path`: size >= 8, header length within the file,
  // header a JSON object, "__metadata__" string-to-string, each entry's dtype
  // known, shape and offsets consistent, offsets within the data section,
  // non-overlapping and covering it exactly. Throws CheckpointError naming
  // the file and the problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in file order (by data offset).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws CheckpointError when the file holds no tensor of that name.
  const Entry& get(const std::string& name) const;
  // Entries in file order.
  const std::vector<Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return file_size_; }

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  size_t file_size_ = 0;
  std::vector<Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace xrun
