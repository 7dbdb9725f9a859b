// tests/fuzz/fuzz_util.h: what the libFuzzer targets share: one scratch
// directory per fuzzing process (under $TMPDIR, removed at exit), writing
// the input to a file there, and silencing std::cerr (the code under test
// prints its usage errors; a fuzzer would print millions of them).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace xrun_fuzz {

// This process's scratch directory, made on first use. Held by a pointer
// that is never freed, so the atexit handler never sees it destroyed.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path* dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xrun-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("xrun fuzz: mkdtemp");
      std::abort();
    }
    auto* p = new std::filesystem::path(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return p;
  }();
  return *dir;
}

inline std::string scratch_file(const std::string& name) { return (scratch() / name).string(); }

// Writes `size` bytes to `path` (truncating); aborts when the disk refuses,
// which is a harness problem, not a finding.
inline void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "xrun fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// Sends std::cerr nowhere for the rest of the process (badbit: writes are
// dropped). Crash reports come from the sanitizers on stderr, untouched.
inline void silence_cerr() { std::cerr.rdbuf(nullptr); }

// XRUN_FUZZ_VERBOSE=1: print each expected error (to see what a seed or a
// regression input exercises: `XRUN_FUZZ_VERBOSE=1 fuzz_idx FILE`).
inline void expected(const char* target, const char* what) {
  static const bool verbose = std::getenv("XRUN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "xrun fuzz %s: expected error: %s\n", target, what);
}

// An exception the target does not expect: report it and abort, so that
// libFuzzer records the input as a crash.
[[noreturn]] inline void unexpected(const char* target, const char* what) {
  std::fprintf(stderr, "xrun fuzz %s: unexpected exception: %s\n", target, what);
  std::abort();
}

}  // namespace xrun_fuzz
