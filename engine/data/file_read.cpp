// engine/data/file_read.cpp: whole-file reads and gzip decompression with
// zlib's inflate (gzip wrapper, concatenated members allowed).
#include "engine/data/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "engine/data/dataset.h"

namespace xrun::data {

RegularFile open_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(path + ": not a regular file (a FIFO, device or socket cannot be a data file)");
  }
  return {fd, static_cast<size_t>(st.st_size)};
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  const auto [fd, size] = open_regular_file(path);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(size);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw DataError(path + ": " + std::to_string(size) + " bytes do not fit in memory");
  }
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      throw DataError(path + ": read error after " + std::to_string(got) + " of " +
                      std::to_string(bytes.size()) + " bytes" +
                      (err ? std::string(" (") + std::strerror(err) + ")" : std::string(" (the file shrank)")));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

bool is_gzip(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& gz, const std::string& path,
                            size_t limit) {
  const size_t cap = limit == std::numeric_limits<size_t>::max() ? limit : limit + 1;
  std::vector<uint8_t> out;
  // The trailer's ISIZE (size mod 2^32) of the last member is a good first guess.
  size_t guess = gz.size() * 4;
  if (gz.size() >= 18) {
    const uint8_t* t = gz.data() + gz.size() - 4;
    const size_t isize = t[0] | t[1] << 8 | t[2] << 16 | static_cast<size_t>(t[3]) << 24;
    // Deflate expands at most ~1032:1; a larger ISIZE is garbage, not a size.
    guess = std::max(guess, std::min(isize, gz.size() * 1032));
  }
  out.resize(std::min(std::max<size_t>(guess, 1024), cap));

  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw DataError(path + ": zlib init failed");
  size_t in_pos = 0, out_pos = 0;
  int rc = Z_OK;
  for (;;) {
    if (out_pos == cap) break;  // past the limit: the caller sees limit + 1 bytes
    if (out_pos == out.size()) out.resize(std::min(out.size() * 2, cap));
    const size_t in_chunk = std::min<size_t>(gz.size() - in_pos, std::numeric_limits<uInt>::max());
    const size_t out_chunk = std::min<size_t>(out.size() - out_pos, std::numeric_limits<uInt>::max());
    zs.next_in = const_cast<Bytef*>(gz.data() + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (concatenated files are valid gzip).
      if (in_pos + 2 <= gz.size() && gz[in_pos] == 0x1f && gz[in_pos + 1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_BUF_ERROR && zs.avail_out > 0 && in_pos == gz.size()) {
      inflateEnd(&zs);
      throw DataError(path + ": gzip data ends early (truncated file?) after " +
                      std::to_string(out_pos) + " decompressed bytes");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      throw DataError(path + ": corrupt gzip data (zlib: " + msg + ")");
    }
  }
  inflateEnd(&zs);
  out.resize(out_pos);
  out.shrink_to_fit();
  return out;
}

}  // namespace xrun::data
