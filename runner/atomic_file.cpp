// runner/atomic_file.cpp: see atomic_file.h.
#include "runner/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace xrun {

namespace {

[[noreturn]] void cannot_write(const std::string& path, int err) {
  throw std::runtime_error("cannot write " + path + ": " +
                           (err == ENOSPC ? std::string("the disk is full") : std::strerror(err)));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> name(path_.begin(), path_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) cannot_write(path_, errno);
  const mode_t mask = ::umask(0);  // as an ordinary new file, not mkstemp's 0600
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  tmp_ = name.data();
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    const int err = errno;
    std::remove(tmp_.c_str());
    cannot_write(path_, err);
  }
}

AtomicFile::~AtomicFile() {
  if (!done_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::commit() {
  errno = 0;
  out_.flush();
  int err = out_ ? 0 : (errno ? errno : EIO);
  out_.close();
  if (!err && !out_) err = errno ? errno : EIO;
  if (!err) {
    const int fd = ::open(tmp_.c_str(), O_RDONLY);
    if (fd < 0 || ::fsync(fd) != 0) err = errno;
    if (fd >= 0) ::close(fd);
  }
  if (!err && std::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err) {
    std::remove(tmp_.c_str());
    done_ = true;
    cannot_write(path_, err);
  }
  done_ = true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.stream() << text;
  file.commit();
}

}  // namespace xrun
