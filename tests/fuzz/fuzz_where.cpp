// tests/fuzz/fuzz_where.cpp: libFuzzer target for `--where KEY=VALUE`:
// parse_where and check_where_keys (runner/output.cpp, compiled into this
// target as into the xrun executable), then Store::list_runs with the
// filters on a small real store made once per process (three runs, as
// tests/store/store_test_util.h makes them), opened read-only as
// `xrun runs` opens it.
//
// Input: one --where argument per line. Malformed or unknown keys are
// refused by the parsers (they print a message: false, not an exception);
// StoreError is the one expected exception. Anything else, a crash or a
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "runner/output.h"
#include "store/store.h"
#include "store/store_test_util.h"

namespace {

// The store every input is filtered against, made on first use.
const xrun::store::Store& fixture() {
  static const xrun::store::Store* db = [] {
    const std::string path = xrun_fuzz::scratch_file("where.db");
    {
      xrun::store::Store w(path);
      const std::string a = w.begin_run(store_test::make_run("fp16", 512, "box-a"));
      xrun::RunSummary summary;
      summary.measured_steps = 10;
      summary.throughput = 1234.5;
      summary.batch_size = 512;
      w.finish_run(a, xrun::store::RunStatus::complete, summary);
      const std::string b = w.begin_run(store_test::make_run("fp32", 256, "box-b"));
      w.finish_run(b, xrun::store::RunStatus::failed, {}, "out of memory");
      (void)w.begin_run(store_test::make_run("bf16", 128, "box-a"));
    }
    return new xrun::store::Store(path, xrun::store::Store::Access::read_only);
  }();
  return *db;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  xrun_fuzz::silence_cerr();
  (void)fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> where;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    where.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  try {
    xrun::cli::Filters filters;
    if (!xrun::cli::parse_where(where, filters)) return 0;
    const xrun::store::Store& db = fixture();
    if (!xrun::cli::check_where_keys(db, filters)) return 0;
    const std::vector<xrun::store::RunInfo> runs = db.list_runs(filters);
    for (const auto& r : runs) (void)xrun::cli::run_json(r).dump();
  } catch (const xrun::store::StoreError& e) {
    xrun_fuzz::expected("where", e.what());
    // expected: SQLite refusing the statement (e.g. too many filters)
  } catch (const std::exception& e) {
    xrun_fuzz::unexpected("where", e.what());
  }
  return 0;
}
