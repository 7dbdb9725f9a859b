// runner/hash.cpp: canonical serialisation of a resolved config and its
// hashes. Canonical = sorted keys, compact, integers as integers and numbers
// declared as floats always as doubles (the schema check normalises them), so
// the same settings give the same text whatever the file's layout. And
// SHA-256 (runner/sha256.h) for names that must identify content.
#include <array>
#include <cstdint>
#include <cstdio>

#include "runner/experiment_detail.h"
#include "runner/sha256.h"

namespace xrun {

std::string canonical_json(const nlohmann::json& value) {
  // nlohmann::json objects are std::map-ordered: keys come out sorted.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string short_hash(const std::string& hash) { return hash.substr(0, 8); }

namespace {

// SHA-256 round constants: the first 32 bits of the fractional parts of the
// cube roots of the first 64 primes (FIPS 180-4, 4.2.2).
constexpr std::array<uint32_t, 64> kSha256K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// One 64-byte block into the state (FIPS 180-4, 6.2.2).
void sha256_block(std::array<uint32_t, 8>& h, const unsigned char* p) {
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
    const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                        kSha256K[t] + w[t];
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

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t whole = bytes.size() / 64 * 64;
  for (size_t at = 0; at < whole; at += 64) sha256_block(h, data + at);
  // The tail, a 1 bit, zeros, and the length in bits (big-endian): one or
  // two blocks.
  unsigned char tail[128] = {0};
  const size_t rest = bytes.size() - whole;
  for (size_t i = 0; i < rest; ++i) tail[i] = data[whole + i];
  tail[rest] = 0x80;
  const size_t tail_size = rest < 56 ? 64 : 128;
  const uint64_t bits = uint64_t(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t at = 0; at < tail_size; at += 64) sha256_block(h, tail + at);
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", static_cast<unsigned>(h[i]));
  return std::string(out, 64);
}

const std::vector<std::string>& experiment_hash_excluded_keys() {
  static const std::vector<std::string> keys = {"store.path", "description", "train.device",
                                                "store.label", "data.path"};
  return keys;
}

namespace detail {

nlohmann::json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/";
  for (char c : dotted) p += c == '.' ? '/' : c;
  return nlohmann::json::json_pointer(p);
}

namespace {

nlohmann::json without(nlohmann::json config, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    auto dot = k.rfind('.');
    if (dot == std::string::npos) {
      config.erase(k);
      continue;
    }
    auto parent = pointer(k.substr(0, dot));
    if (config.contains(parent)) config[parent].erase(k.substr(dot + 1));
  }
  return config;
}

void flatten(const nlohmann::json& v, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (v.is_object()) {
    for (auto& [k, child] : v.items()) flatten(child, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = canonical_json(v);
}

// Keys added to the schema after results were first stored, with the value
// that behaves as xrun did before them: at that value they are left out of
// the hashed text, so a config that does not use them keeps its hash and
// stored runs still match their plans.
nlohmann::json without_later_defaults(nlohmann::json config) {
  static const std::vector<std::pair<std::string, nlohmann::json>> later = {
      {"train.per_layer_update", false},
      {"train.eval_every", 0},
      {"train.optimizer.lr_scaling", "none"},
      {"train.optimizer.reference_batch", 256},
      {"measure.target_accuracy", 0.0},
      {"train.ranks", 1},
      {"distributed.backend", "auto"},
      {"distributed.timeout_s", 120},
      {"distributed.bucket_mb", 25.0},
      // Issue 25: GPT-2's shape (0 for a ResNet) and gradient clipping.
      {"model.layers", 0},
      {"model.heads", 0},
      {"model.width", 0},
      {"model.context", 0},
      {"model.vocab", 0},
      {"data.sequence_length", 0},
      {"train.clip_grad_norm", 0.0},
  };
  for (const auto& [key, old_behaviour] : later) {
    const auto p = pointer(key);
    if (config.contains(p) && config[p] == old_behaviour) config = without(config, {key});
  }
  // A section added later whose keys are all at their defaults goes too.
  for (const char* section : {"distributed"})
    if (config.contains(section) && config[section].empty()) config.erase(section);
  return config;
}

}  // namespace

std::string config_hash(const nlohmann::json& resolved) {
  return fnv1a_hex(
      canonical_json(without(without_later_defaults(resolved), {"store.path", "description"})));
}

std::string experiment_hash(const nlohmann::json& resolved) {
  return fnv1a_hex(
      canonical_json(without(without_later_defaults(resolved), experiment_hash_excluded_keys())));
}

std::map<std::string, std::string> flatten_params(const nlohmann::json& resolved) {
  std::map<std::string, std::string> out;
  flatten(resolved, "", out);
  return out;
}

}  // namespace detail
}  // namespace xrun
