// tests/fuzz/fuzz_experiment.cpp: libFuzzer target for experiment files:
// TOML text -> validated, swept, resolved runs (runner/experiment.cpp,
// runner/config_schema.cpp, runner/resolve.cpp), as `xrun plan` does it.
//
// Input: the experiment file's text; every line after a line "#%set" is one
// `--set KEY=VALUE` argument. A bad file or --set must end in an
// ExperimentError; any other exception, a crash or a sanitizer report is a
// bug. Each planned run is also formatted (xrun plan, table and JSON) and
// mapped to the engine's RunConfig.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "runner/experiment.h"

namespace {

constexpr const char* kSetMarker = "\n#%set\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  xrun::PlanOptions options;
  options.hostname = "fuzz-host";
  if (const size_t marker = text.find(kSetMarker); marker != std::string::npos) {
    std::string sets = text.substr(marker + std::char_traits<char>::length(kSetMarker));
    text.resize(marker + 1);
    size_t start = 0;
    while (start <= sets.size()) {
      size_t end = sets.find('\n', start);
      if (end == std::string::npos) end = sets.size();
      if (end > start) options.sets.push_back(sets.substr(start, end - start));
      start = end + 1;
    }
  }
  // "auto" devices resolve both ways, depending on the input.
  options.gpu_available = size > 0 && (data[size - 1] & 1) != 0;
  try {
    const xrun::Plan plan = xrun::load_plan_from_string(text, "fuzz.toml", options);
    (void)xrun::format_plan(plan, false);
    (void)xrun::format_plan(plan, true);
    for (const xrun::RunSpec& run : plan.runs) (void)xrun::to_run_config(run.config);
  } catch (const xrun::ExperimentError& e) {
    xrun_fuzz::expected("experiment", e.what());
    // expected: a bad file or --set, reported as FILE:LINE:COL: KEY: message
  } catch (const std::exception& e) {
    xrun_fuzz::unexpected("experiment", e.what());
  }
  return 0;
}
