// runner/experiment_detail.h: what the experiment loader's files share: where
// a value came from (file position or --set), errors at that place, the
// per-run resolution of defaults and cross-key rules, and the hashes.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "runner/experiment.h"

namespace xrun::detail {

// Where a value was written: a file position, a --set argument, or nowhere
// (a default: line 0).
struct Origin {
  std::string file;  // display name of the experiment file
  int line = 0, column = 0;
  std::string set;   // "KEY=VALUE" when the value came from --set
};

// One key's value before resolution, with its origin.
struct Setting {
  nlohmann::json value;
  Origin origin;
};
using Settings = std::map<std::string, Setting>;  // dotted key -> value

// Throws the ExperimentError for a problem with `key` at `origin`. The key is
// put in front of the message unless key_in_message (unknown-key messages).
[[noreturn]] void fail(const Origin& origin, const std::string& key, const std::string& message,
                       bool key_in_message = false);

// Per-run facts resolution needs besides the settings.
struct RunContext {
  std::string file;  // display name, for errors about defaults
  int index = 0;     // run index, 0-based
  bool in_sweep = false;  // more than one run: cross-key errors name the run
  const PlanOptions* options = nullptr;
};

// Fills in every run key (defaults, computed defaults, device and label),
// checks the rules that join several keys and the device rules, and returns
// the nested resolved config. Throws ExperimentError.
nlohmann::json resolve_run(const Settings& settings, const RunContext& context);

// Hash of the resolved config without store.path and description.
std::string config_hash(const nlohmann::json& resolved);
// Hash without those and train.device, store.label, data.path: the same
// experiment on any machine.
std::string experiment_hash(const nlohmann::json& resolved);
// Every leaf of a nested object as dotted key -> canonical JSON text.
std::map<std::string, std::string> flatten_params(const nlohmann::json& resolved);

// A JSON pointer for a dotted key: "train.optimizer.lr" -> /train/optimizer/lr.
nlohmann::json::json_pointer pointer(const std::string& dotted);

}  // namespace xrun::detail
