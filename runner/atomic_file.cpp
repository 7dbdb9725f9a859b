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

bool AtomicFile::FdBuffer::drain() {
  const char* p = pbase();
  while (p < pptr() && error == 0) {
    const ssize_t n = ::write(fd, p, static_cast<size_t>(pptr() - p));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : EIO;
    else p += n;
  }
  setp(data_, data_ + sizeof data_);
  return error == 0;
}

AtomicFile::FdBuffer::int_type AtomicFile::FdBuffer::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), out_(&buffer_) {
  std::vector<char> name(path_.begin(), path_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) cannot_write(path_, errno);
  const mode_t mask = ::umask(0);  // as an ordinary new file, not mkstemp's 0600
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  tmp_ = name.data();
  buffer_.fd = fd;
  buffer_.setp(buffer_.data_, buffer_.data_ + sizeof buffer_.data_);
}

AtomicFile::~AtomicFile() {
  if (done_) return;
  ::close(buffer_.fd);
  std::remove(tmp_.c_str());
}

void AtomicFile::commit() {
  out_.flush();
  int err = buffer_.drain() ? 0 : buffer_.error;
  if (!err && ::fsync(buffer_.fd) != 0) err = errno;
  if (::close(buffer_.fd) != 0 && !err) err = errno;
  done_ = true;
  if (!err && std::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err) {
    std::remove(tmp_.c_str());
    cannot_write(path_, err);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.stream() << text;
  file.commit();
}

}  // namespace xrun
