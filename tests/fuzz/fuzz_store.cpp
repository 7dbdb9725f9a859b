// tests/fuzz/fuzz_store.cpp: libFuzzer target for opening and merging
// store files (store/schema.cpp, store/store.cpp, store/merge.cpp): the
// input is written as a .db file, opened read-only as the query commands
// open it (then listed, and its first run shown), and merged with
// merge_stores into a fresh output or into a copy of a small real store.
//
// StoreError is the one expected exception. Besides crashes and sanitizer
// reports, a bug is: a failed merge that leaves a new output behind or
// changes an existing one, or a merge whose output cannot be opened.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "store/merge.h"
#include "store/store.h"
#include "store/store_test_util.h"

namespace fs = std::filesystem;
using xrun::store::Store;
using xrun::store::StoreError;

namespace {

// A small real store (two runs) that some inputs are merged into, made once.
const std::string& base_store() {
  static const std::string* path = [] {
    auto* p = new std::string(xrun_fuzz::scratch_file("base.db"));
    {
      Store w(*p);
      const std::string a = w.begin_run(store_test::make_run("fp16", 512, "box-a"));
      xrun::RunSummary summary;
      summary.measured_steps = 10;
      summary.throughput = 1234.5;
      w.finish_run(a, xrun::store::RunStatus::complete, summary);
      (void)w.begin_run(store_test::make_run("fp32", 64, "box-b"));
    }
    return p;
  }();
  return *path;
}

void remove_db(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
}

void copy_db(const std::string& from, const std::string& to) {
  remove_db(to);
  fs::copy_file(from, to);
}

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "xrun fuzz store: %s\n", what.c_str());
  std::abort();
}

size_t run_count(const std::string& path) {
  try {
    return Store(path, Store::Access::read_only).list_runs().size();
  } catch (const StoreError& e) {
    bug("the merge output " + path + " cannot be opened: " + e.what());
  }
}

void read_input(const std::string& path) {
  try {
    Store s(path, Store::Access::read_only);
    (void)s.schema_version();
    (void)s.filter_keys();
    const auto runs = s.list_runs();
    if (!runs.empty()) {
      (void)s.get_run(std::to_string(runs.front().id));
      (void)s.get_steps(runs.front().uuid);
      (void)s.get_trace(runs.front().uuid);
    }
  } catch (const StoreError& e) {
    xrun_fuzz::expected("store", e.what());  // not SQLite, not an xrun store, corrupt, newer, ...
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)base_store();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = xrun_fuzz::scratch_file("input.db");
  const std::string out = xrun_fuzz::scratch_file("out.db");
  remove_db(input);
  remove_db(out);
  xrun_fuzz::write_file(input, data, size);
  try {
    read_input(input);

    const bool into_existing = size % 2 == 1;
    size_t before = 0;
    if (into_existing) {
      copy_db(base_store(), out);
      before = run_count(out);
    }
    try {
      const auto counts = xrun::store::merge_stores(out, {input});
      if (counts.size() != 1) bug("merge_stores returned " + std::to_string(counts.size()) + " counts");
      const size_t after = run_count(out);
      if (after != before + static_cast<size_t>(counts[0].added))
        bug("the output has " + std::to_string(after) + " runs, expected " +
            std::to_string(before) + " + " + std::to_string(counts[0].added));
    } catch (const StoreError& e) {
      xrun_fuzz::expected("store", e.what());
      std::error_code ec;
      if (!into_existing && fs::exists(out, ec)) bug("a failed merge left its new output behind");
      if (into_existing && run_count(out) != before) bug("a failed merge changed its output");
    }
  } catch (const std::exception& e) {
    xrun_fuzz::unexpected("store", e.what());
  }
  return 0;
}
