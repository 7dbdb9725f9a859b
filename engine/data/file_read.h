// engine/data/file_read.h: reading a dataset file whole into memory, and
// gunzipping it when it starts with the gzip magic bytes (1f 8b). Errors
// are DataError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace xrun::data {

// An open descriptor of `path` (read-only, close-on-exec) and its size;
// DataError naming it when it cannot be opened or is not a regular file.
// Opened without waiting: a FIFO is refused at once instead of blocking,
// deaf to Ctrl-C, until a writer comes. The caller closes `fd`.
struct RegularFile {
  int fd = -1;
  size_t size = 0;
};
RegularFile open_regular_file(const std::string& path);

// The bytes of `path` (a regular file); throws DataError if it cannot be
// opened or read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// True when `bytes` starts with the gzip magic 1f 8b.
bool is_gzip(const std::vector<uint8_t>& bytes);

// Decompresses gzip data (all members); `path` only names the file in
// errors (corrupt or truncated stream). Stops after `limit` + 1 bytes, so a
// caller that knows the size to expect never holds more than one byte past
// it (a small file that inflates to gigabytes costs nothing).
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& gz, const std::string& path,
                            size_t limit = std::numeric_limits<size_t>::max());

}  // namespace xrun::data
