// tests/config/sha256_test.cpp: the self-contained SHA-256 of core/sha256.h
// (the frozen experiment copies of `xrun submit` are named by it) against
// the FIPS 180-4 examples and every padding case: a tail that fits in the
// last block, one that needs a second block, and whole blocks; its HMAC (the
// ranks' proof that they hold the run's secret) against RFC 4231.
#include "catch2_compat.h"

#include <string>

#include "core/sha256.h"

using xrun::sha256_hex;

namespace {
std::string hmac_hex(const std::string& key, const std::string& message) {
  const xrun::Sha256Digest d = xrun::hmac_sha256(key, message);
  return xrun::to_hex(d.data(), d.size());
}
}  // namespace

TEST_CASE("SHA-256: the FIPS 180-4 examples", "[config][hash][sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                   "klmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256: lengths around the block and padding boundaries", "[config][hash][sha256]") {
  // Python's hashlib.sha256(b"a" * n).hexdigest().
  const std::pair<size_t, const char*> cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const auto& [n, digest] : cases) {
    INFO(n << " bytes");
    CHECK(sha256_hex(std::string(n, 'a')) == digest);
  }
  // Bytes with the high bit set are bytes, not signed chars.
  CHECK(sha256_hex(std::string("\xff", 1)) ==
        "a8100ae6aa1940d0b663bb31cd466142ebbdbd5187131b92d93818987832eb89");
}

TEST_CASE("HMAC-SHA-256: the RFC 4231 test cases", "[config][hash][sha256]") {
  // Test case 1: a 20-byte key; 2: a key shorter than the digest; 6: a key
  // longer than the block, hashed first.
  CHECK(hmac_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
