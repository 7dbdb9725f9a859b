// core/sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104) of byte
// strings, self-contained (no OpenSSL on every build host). Used where a name
// must identify content (the frozen experiment copies of `xrun submit`, where
// a 64-bit FNV-1a is too weak against crafted input) and where the ranks of a
// run prove to each other that they hold the run's secret
// (engine/distributed/rank_secret.cpp). Checked against the FIPS and RFC 4231
// vectors in tests/config/sha256_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace xrun {

using Sha256Digest = std::array<unsigned char, 32>;

namespace sha256_detail {

// Round constants: the first 32 bits of the fractional parts of the cube
// roots of the first 64 primes (FIPS 180-4, 4.2.2).
inline constexpr std::array<uint32_t, 64> kK = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// One 64-byte block into the state (FIPS 180-4, 6.2.2).
inline void block(std::array<uint32_t, 8>& h, const unsigned char* p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 |
           uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 =
        k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

}  // namespace sha256_detail

// The digest of `bytes`.
inline Sha256Digest sha256(std::string_view bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t whole = bytes.size() / 64 * 64;
  for (size_t at = 0; at < whole; at += 64) sha256_detail::block(h, data + at);
  // The tail, a 1 bit, zeros, and the length in bits (big-endian): one or
  // two blocks.
  unsigned char tail[128] = {0};
  const size_t rest = bytes.size() % 64;  // < 64: the tail and its 0x80 fit in 128
  for (size_t i = 0; i < rest; ++i) tail[i] = data[whole + i];
  tail[rest] = 0x80;
  const size_t tail_size = rest < 56 ? 64 : 128;
  const uint64_t bits = uint64_t(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t at = 0; at < tail_size; at += 64) sha256_detail::block(h, tail + at);
  Sha256Digest out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<unsigned char>(h[i] >> (24 - 8 * j));
  return out;
}

// Lowercase hex of any bytes (a digest: 64 digits).
inline std::string to_hex(const unsigned char* p, size_t n) {
  std::string out(2 * n, '0');
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

// The digest as 64 lowercase hex digits.
inline std::string sha256_hex(std::string_view bytes) {
  const Sha256Digest d = sha256(bytes);
  return to_hex(d.data(), d.size());
}

// HMAC-SHA-256 of `message` under `key` (RFC 2104; keys longer than the
// 64-byte block are hashed first).
inline Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  std::string k(64, '\0');
  if (key.size() > 64) {
    const Sha256Digest kd = sha256(key);
    for (size_t i = 0; i < kd.size(); ++i) k[i] = static_cast<char>(kd[i]);
  } else {
    for (size_t i = 0; i < key.size(); ++i) k[i] = key[i];
  }
  std::string inner(64, '\0'), outer(64, '\0');
  for (size_t i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  inner.append(message);
  const Sha256Digest id = sha256(inner);
  outer.append(reinterpret_cast<const char*>(id.data()), id.size());
  return sha256(outer);
}

}  // namespace xrun
