// tests/cuda/cuda_main.cpp: test_cuda's own Catch2 main. Catch2 v2 has no
// SKIP, so a case that returned early without a GPU used to count as passed;
// instead, where no GPU can run this build's kernels, this main runs no case,
// prints one line `skipped: <reason>` and exits 77, which the suite's CTest
// registration (tests/CMakeLists.txt, SKIP_RETURN_CODE 77) reports as
// skipped. Listing (--list-test-names-only and --list-reporters, which
// catch_discover_tests runs at build time, --list-tests, --list-tags, -h)
// works everywhere. Where a GPU runs the cases, every comparison they made
// is printed after the session as one table (as ggml's test-backend-ops
// does): op, precision, what, measure, error, threshold, verdict. A case
// that cannot run on this machine's CPU (XRUN_SKIP, tests/skip.h: the CPU
// bf16 reference without bf16 kernels) is counted as in every suite
// (tests/skip_counter.cpp): when every case that ran skipped, it exits 77.
#define CATCH_CONFIG_RUNNER
#include "catch2_compat.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "cuda_test_util.h"
#include "engine/backend.h"
#include "skip.h"
#include "engine/device/device_info.h"

namespace xrun::cudatest {

std::vector<Comparison>& comparisons() {
  static std::vector<Comparison> all;
  return all;
}

}  // namespace xrun::cudatest

namespace {

// Why no GPU can run the cases, or "" when one can.
std::string skip_reason() {
  if (xrun::cuda_engine_available()) return "";
  const xrun::CudaInfo info = xrun::query_cuda();
  if (!info.compiled_with_cuda)
    return "this build has no CUDA engine (XRUN_CUDA=OFF or no toolkit)";
  if (info.gpus.empty())
    return "no usable GPU: " + (info.status.empty() ? std::string("none found") : info.status) +
           " (see `xrun doctor`)";
  return "no GPU this build's kernels run on (built for " + info.cuda_architectures +
         "; see `xrun doctor`)";
}

std::string fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return s.substr(0, width - 3) + "...";
}

void print_table() {
  const auto& rows = xrun::cudatest::comparisons();
  if (rows.empty()) return;
  size_t what_width = 8;
  for (const auto& r : rows)
    what_width = std::max(what_width, std::min<size_t>(r.what.size(), 100));
  std::printf(
      "\nCUDA vs CPU comparisons (nmse: sum (gpu-ref)^2 / sum ref^2; parity: worst error / its "
      "bound against PyTorch float64, see tests/engine/torch_parity.h)\n");
  std::printf("%-10s %-5s %-*s %-7s %10s %10s  %s\n", "op", "prec", static_cast<int>(what_width),
              "what", "measure", "error", "threshold", "verdict");
  int failed = 0;
  for (const auto& r : rows) {
    failed += r.ok ? 0 : 1;
    std::printf("%-10s %-5s %-*s %-7s %10.3g %10.3g  %s\n", r.op.c_str(), r.precision.c_str(),
                static_cast<int>(what_width), fit(r.what, what_width).c_str(), r.measure.c_str(),
                r.error, r.threshold, r.ok ? "OK" : "FAIL");
  }
  std::printf("cuda comparisons: %zu, %zu OK, %d FAIL\n", rows.size(), rows.size() - failed,
              failed);
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& c = session.configData();
#if XRUN_CATCH_MAJOR == 2
  const bool listed_otherwise = c.listTestNamesOnly;  // v3: --list-tests --verbosity quiet
#else
  const bool listed_otherwise = c.listListeners;
#endif
  const bool listing = c.listTests || listed_otherwise || c.listTags || c.listReporters ||
                       c.showHelp || c.libIdentify;
  if (!listing) {
    const std::string why = skip_reason();
    if (!why.empty()) {
      std::printf("skipped: %s\n", why.c_str());
      return 77;
    }
  }
  const int rc = session.run();
  if (!listing) print_table();
  std::fflush(stdout);
  if (rc == 0 && xrun_test::every_case_skipped()) return 77;
  return rc;
}
