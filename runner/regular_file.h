// runner/regular_file.h: reading a file that must be a regular file without
// ever blocking on a FIFO or a device (opened O_NONBLOCK and checked with
// fstat before a byte is read), and without holding more of it in memory
// than the caller asks for: jobs.tsv and the task logs that `xrun jobs` and
// `xrun collect` read in a results folder anyone may have written to.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace xrun::cli {

struct RegularFile {
  enum Status { ok, missing, not_regular, unreadable } status = missing;
  std::string text;  // ok: the bytes read
  std::string why;   // not_regular, unreadable: what it is, or the error
  bool cut = false;  // ok: the file held more than was read
};

// The first `max_bytes` of the file at `path` or, with `tail`, the last.
inline RegularFile read_regular_file(const std::string& path, size_t max_bytes, bool tail = false) {
  RegularFile out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.status = errno == ENOENT ? RegularFile::missing : RegularFile::unreadable;
    out.why = std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    out.status = RegularFile::unreadable;
    out.why = std::strerror(errno);
    ::close(fd);
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.status = RegularFile::not_regular;
    out.why = S_ISFIFO(st.st_mode)  ? "a FIFO"
              : S_ISDIR(st.st_mode) ? "a directory"
              : S_ISSOCK(st.st_mode) ? "a socket"
                                     : "a device";
    ::close(fd);
    return out;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > max_bytes) {
    out.cut = true;
    if (tail) ::lseek(fd, static_cast<off_t>(size - max_bytes), SEEK_SET);
  }
  out.text.resize(std::min(size, max_bytes));
  size_t done = 0;
  while (done < out.text.size()) {
    const ssize_t n = ::read(fd, out.text.data() + done, out.text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.status = RegularFile::unreadable;
      out.why = std::strerror(errno);
      ::close(fd);
      return out;
    }
    if (n == 0) break;  // shorter than fstat said: truncated meanwhile
    done += static_cast<size_t>(n);
  }
  out.text.resize(done);
  ::close(fd);
  out.status = RegularFile::ok;
  return out;
}

}  // namespace xrun::cli
