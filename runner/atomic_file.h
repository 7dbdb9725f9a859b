// runner/atomic_file.h: output files (trace, report, export) written under a
// temporary name beside the target and renamed over it once complete, so an
// error half-way (a full disk, Ctrl-C) never leaves a truncated file and an
// existing file keeps its bytes until the new one is whole.
//
// Only a regular file (or a new one) is replaced that way. "-" is standard
// output; a device (/dev/null, a terminal), a FIFO or a socket is written
// directly, as a shell's `>` would, never replaced by a regular file; a
// symbolic link is followed (its chain, to the last target) and the target
// is written, the link kept.
#pragma once

#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <string>

namespace xrun {

class AtomicFile {
 public:
  // Creates the temporary file (TARGET.tmp-XXXXXX), or opens a device or
  // FIFO for writing (a FIFO waits for its reader). Throws
  // std::runtime_error "cannot write PATH: why" when the directory is
  // missing or read-only, or PATH is a directory.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless committed; never throws
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  // Flushes, syncs and renames over the target (a direct write: flushes).
  // Throws std::runtime_error naming the target and the OS error ("the disk
  // is full"); the temporary file is removed.
  void commit();

 private:
  // write(2) under a buffer, keeping the first errno, which std::ofstream
  // does not report.
  class FdBuffer : public std::streambuf {
   public:
    int fd = -1;
    int error = 0;
    bool drain();

   protected:
    int_type overflow(int_type c) override;
    int sync() override { return drain() ? 0 : -1; }

   private:
    char data_[1 << 16];
    friend class AtomicFile;
  };

  std::string path_, target_, tmp_;  // tmp_ empty: a direct write to target_
  bool close_fd_ = true;             // false for standard output
  FdBuffer buffer_;
  std::ostream out_;
  bool done_ = false;
};

// The whole of `text` into `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

// "" when writing `output` leaves the result store `db` alone; otherwise the
// message for a usage error: `output` is the store or its -wal, -shm or
// -journal file, by any spelling, symbolic link or hard link (the same
// device and inode).
std::string output_overwrites_store(const std::string& output, const std::string& db);

}  // namespace xrun
