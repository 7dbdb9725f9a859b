// tests/config/helpers.h: shared bits of the experiment-file tests: paths to
// the fixtures and a way to load TOML text and catch the error it raises.
#pragma once

#include <string>

#include "runner/experiment.h"

namespace xrun::test {

inline std::string source_path(const std::string& relative) {
  return std::string(XRUN_SOURCE_DIR) + "/" + relative;
}

inline PlanOptions cpu_options() {
  PlanOptions o;
  o.hostname = "testhost";
  return o;
}

inline PlanOptions gpu_options() {
  PlanOptions o = cpu_options();
  o.gpu_available = true;
  return o;
}

inline Plan plan_text(const std::string& toml, PlanOptions o = cpu_options()) {
  return load_plan_from_string(toml, "t.toml", o);
}

// The error loading `toml` raises; fails the test when there is none.
inline ExperimentError error_of(const std::string& toml, PlanOptions o = cpu_options()) {
  try {
    load_plan_from_string(toml, "t.toml", o);
  } catch (const ExperimentError& e) {
    return e;
  }
  throw std::logic_error("expected an ExperimentError for:\n" + toml);
}

}  // namespace xrun::test
