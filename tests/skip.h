// tests/skip.h: skipping a test case that cannot run on this machine (no
// root for a mount, no Chromium, no NVTX headers, a GPU present). Catch2 v2
// has no SKIP, and a case that returned early counted as passed; instead
// XRUN_SKIP(reason) prints "skipped: <reason>", marks the case and returns,
// and the shared main (catch_main.cpp; the counting is skip_counter.cpp) exits 77 when every case that ran was
// skipped. CTest runs one case per process and reports 77 as skipped
// (SKIP_RETURN_CODE, tests/CMakeLists.txt). A case that checked something
// and then skips the rest (a part that needs root) is reported as skipped
// too: not everything it claims was run.
#pragma once

#include "catch2_compat.h"

namespace xrun_test {

// Marks the running case as skipped (read by skip_counter.cpp's listener).
void mark_skipped();

// True when at least one case ran and every case that ran was skipped: the
// mains then exit 77.
bool every_case_skipped();

}  // namespace xrun_test

#define XRUN_SKIP(reason)             \
  do {                                \
    WARN("skipped: " << reason);      \
    ::xrun_test::mark_skipped();      \
    return;                           \
  } while (false)
