// runner/sha256.h: SHA-256 (FIPS 180-4) of a byte string, for names that
// must identify content (the frozen experiment copy of `xrun submit`), where
// a 64-bit FNV-1a (config hashes) is too weak against crafted input.
// Self-contained (no OpenSSL on every build host); implemented in
// runner/hash.cpp, checked against the FIPS vectors in
// tests/config/sha256_test.cpp.
#pragma once

#include <string>
#include <string_view>

namespace xrun {

// The digest as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace xrun
