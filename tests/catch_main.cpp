// tests/catch_main.cpp: the one Catch2 main shared by every test executable
// (tests/cuda has its own). When every case that ran skipped (tests/skip.h,
// counted by skip_counter.cpp) it exits 77, which CTest reports as skipped,
// not passed.
#define CATCH_CONFIG_RUNNER
#include "catch2_compat.h"

#include "skip.h"

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && xrun_test::every_case_skipped()) return 77;
  return failed;
}
