// runner/atomic_file.cpp: see atomic_file.h.
#include "runner/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace xrun {

namespace {

[[noreturn]] void cannot_write(const std::string& path, int err) {
  throw std::runtime_error("cannot write " + path + ": " +
                           (err == ENOSPC ? std::string("the disk is full") : std::strerror(err)));
}

// `path` with the symbolic links of its last component followed to the end
// of the chain; the target need not exist (a dangling link is written
// through, creating its target).
std::string link_target(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const std::filesystem::path to = std::filesystem::read_symlink(p, ec);
    if (ec || to.empty()) return p;
    p = to.is_absolute() ? to.string() : (std::filesystem::path(p).parent_path() / to).string();
  }
  cannot_write(path, ELOOP);
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
  buffer_.setp(buffer_.data_, buffer_.data_ + sizeof buffer_.data_);
  if (path_ == "-") {  // standard output, left open
    buffer_.fd = STDOUT_FILENO;
    close_fd_ = false;
    return;
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {  // through every link (/dev/stdout too)
    if (S_ISDIR(st.st_mode)) cannot_write(path_, EISDIR);
    if (!S_ISREG(st.st_mode)) {
      // A device, FIFO or socket: written as it is, never replaced by a
      // regular file (as root, renaming over /dev/null would succeed).
      const int fd = ::open(path_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      if (fd < 0) cannot_write(path_, errno);
      target_ = path_;
      buffer_.fd = fd;
      return;
    }
    // An existing file is replaced where it is, whatever links lead to it.
    char* real = ::realpath(path_.c_str(), nullptr);
    target_ = real ? real : link_target(path_);
    std::free(real);
  } else {
    target_ = link_target(path_);  // a new file, or the target of a dangling link
  }
  std::vector<char> name(target_.begin(), target_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) cannot_write(path_, errno);
  const mode_t mask = ::umask(0);  // as an ordinary new file, not mkstemp's 0600
  ::umask(mask);
  // A file replaced keeps its permissions; a new one gets the umask's.
  const bool existed = ::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  ::fchmod(fd, existed ? (st.st_mode & 0777) : (0666 & ~mask));
  tmp_ = name.data();
  buffer_.fd = fd;
}

AtomicFile::~AtomicFile() {
  if (done_) return;
  if (close_fd_ && buffer_.fd >= 0) ::close(buffer_.fd);
  if (!tmp_.empty()) std::remove(tmp_.c_str());
}

void AtomicFile::commit() {
  out_.flush();
  int err = buffer_.drain() ? 0 : buffer_.error;
  done_ = true;
  if (tmp_.empty()) {  // a direct write: nothing to sync or rename
    if (close_fd_ && ::close(buffer_.fd) != 0 && !err) err = errno;
    if (err) cannot_write(path_, err);
    return;
  }
  if (!err && ::fsync(buffer_.fd) != 0) err = errno;
  if (::close(buffer_.fd) != 0 && !err) err = errno;
  if (!err && std::rename(tmp_.c_str(), target_.c_str()) != 0) err = errno;
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

std::string output_overwrites_store(const std::string& output, const std::string& db) {
  struct stat out {};
  if (output == "-" || ::stat(output.c_str(), &out) != 0) return "";  // a new file is no store
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    struct stat st {};
    const std::string file = db + suffix;
    if (::stat(file.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
      return "-o " + output + " is " + (*suffix ? "a file of " : "") +
             "the result store being read (" + file +
             "); writing it would replace the stored runs: choose another output file";
  }
  return "";
}

}  // namespace xrun
