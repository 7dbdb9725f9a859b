// runner/hash.cpp: canonical serialisation of a resolved config and its
// hashes. Canonical = sorted keys, compact, integers as integers and numbers
// declared as floats always as doubles (the schema check normalises them), so
// the same settings give the same text whatever the file's layout.
#include <cstdint>
#include <cstdio>

#include "runner/experiment_detail.h"

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
