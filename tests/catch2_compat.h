// tests/catch2_compat.h: the one place the test suite meets Catch2's major
// versions (Debian 12 ships Catch2 2.13, Debian 13 ships 3.7). Every test
// file includes this instead of Catch2's own header. With v3 it maps the v2
// names the tests use onto v3's: Approx (v3: Catch::Approx), Catch::Contains
// and Catch::StartsWith (v3: Catch::Matchers::ContainsSubstring and
// Catch::Matchers::StartsWith), and XRUN_CATCH_LISTENER_BASE for the
// listener base class (v3: Catch::EventListenerBase). The main (tests/
// catch_main.cpp, tests/cuda/cuda_main.cpp) is ours in both: with v2 it
// defines CATCH_CONFIG_RUNNER first, with v3 it links Catch2::Catch2, not
// Catch2WithMain.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

#define XRUN_CATCH_MAJOR 3
#define XRUN_CATCH_LISTENER_BASE Catch::EventListenerBase

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& s,
                                                CaseSensitive cs = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(s, cs);
}
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;

#else
#include <catch2/catch.hpp>

#define XRUN_CATCH_MAJOR 2
#define XRUN_CATCH_LISTENER_BASE Catch::TestEventListenerBase
#endif
