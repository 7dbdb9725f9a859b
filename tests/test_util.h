// tests/test_util.h: helpers every test suite shares: a scratch directory
// removed at scope exit, byte files, running a command with its output and
// exit status, the Python interpreter for the interoperability tests, and the
// paths of the source tree and the built xrun.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace xrun_test {

// A fresh directory under $TMPDIR, deleted with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xrun_test_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("cannot write " + path);
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct CommandResult {
  int status = -1;     // exit status; 128 + N when killed by signal N; -1 when not run
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell with stderr folded into stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != -1 && WIFEXITED(status)) r.status = WEXITSTATUS(status);
  if (status != -1 && WIFSIGNALED(status)) r.status = 128 + WTERMSIG(status);
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The Python interpreter the interoperability tests use: $XRUN_PYTHON or python3.
inline std::string python() {
  const char* p = std::getenv("XRUN_PYTHON");
  return p != nullptr && *p != '\0' ? p : "python3";
}

inline std::string source_path(const std::string& relative) {
  return std::string(XRUN_SOURCE_DIR) + "/" + relative;
}

// A directory made read-only for the test's lifetime, as a user's would be.
// Root ignores permission bits, so as root it is a read-only bind mount of
// the directory onto itself; otherwise its mode is set to 0555. `ok()` is
// false (and why() says why) where neither is possible: the test then skips.
class ReadOnlyDir {
 public:
  explicit ReadOnlyDir(const std::string& dir) : dir_(dir) {
    if (::geteuid() == 0) {
      const std::string q = "'" + dir + "'";
      mounted_ = std::system(("mount --bind " + q + " " + q + " 2>/dev/null && mount -o remount,bind,ro " +
                              q + " " + q + " 2>/dev/null").c_str()) == 0;
      if (!mounted_) {
        std::system(("umount " + q + " 2>/dev/null").c_str());
        why_ = "cannot bind-mount " + dir + " read-only here";
      }
    } else {
      std::filesystem::permissions(dir, std::filesystem::perms::owner_write |
                                            std::filesystem::perms::group_write |
                                            std::filesystem::perms::others_write,
                                   std::filesystem::perm_options::remove);
      chmodded_ = true;
    }
  }
  ~ReadOnlyDir() {
    if (mounted_) std::system(("umount '" + dir_ + "' 2>/dev/null").c_str());
    if (chmodded_)
      std::filesystem::permissions(dir_, std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::add);
  }
  ReadOnlyDir(const ReadOnlyDir&) = delete;
  ReadOnlyDir& operator=(const ReadOnlyDir&) = delete;
  bool ok() const { return mounted_ || chmodded_; }
  const std::string& why() const { return why_; }

 private:
  std::string dir_, why_;
  bool mounted_ = false, chmodded_ = false;
};

inline std::string xrun_binary() { return std::string(XRUN_BINARY_DIR) + "/runner/xrun"; }

// A tiny CPU experiment file: resnet18 on 16x16 synthetic images, batch 16,
// `samples` training images read by `workers` threads; `train` holds the
// [train] lines besides device and batch size, `tables` whole tables to add.
inline std::string tiny_experiment(const std::string& name, const std::string& train,
                                   const std::string& tables = "", int samples = 32,
                                   int workers = 0) {
  return "name = \"" + name + "\"\n[model]\narch = \"resnet18\"\n[data]\nsource = \"synthetic\"\n" +
         "image_size = 16\nsamples = " + std::to_string(samples) + "\nworkers = " +
         std::to_string(workers) + "\n[train]\ndevice = \"cpu\"\nbatch_size = 16\n" + train +
         "\n[measure]\nwarmup_steps = 1\n" + tables;
}

}  // namespace xrun_test
