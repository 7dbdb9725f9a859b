// tests/catch_main.cpp: the one Catch2 main shared by every test executable
// (tests/cuda has its own). Besides running the session it counts the cases
// that ran and those that skipped (tests/skip.h): when every case that ran
// skipped, it exits 77, which CTest reports as skipped, not passed.
#define CATCH_CONFIG_RUNNER
#include "catch2_compat.h"

#include "skip.h"

namespace {

int cases_run = 0;
int cases_skipped = 0;
bool current_skipped = false;

struct SkipCounter : XRUN_CATCH_LISTENER_BASE {
  using Base = XRUN_CATCH_LISTENER_BASE;
  using Base::Base;
  void testCaseStarting(const Catch::TestCaseInfo&) override { current_skipped = false; }
  void testCaseEnded(const Catch::TestCaseStats&) override {
    ++cases_run;
    if (current_skipped) ++cases_skipped;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipCounter)

void xrun_test::mark_skipped() { current_skipped = true; }

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && cases_run > 0 && cases_skipped == cases_run) return 77;
  return failed;
}
