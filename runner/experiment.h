// runner/experiment.h: experiment files. Reads a TOML experiment, applies
// `--set KEY=VALUE` overrides, validates every key against one schema
// (runner/config_schema.cpp), resolves every default, expands the sweep into
// RunSpecs (each a fully resolved config with a stable hash), maps a resolved
// config to the engine's RunConfig and formats the `xrun plan` output.
//
// Every problem found is an ExperimentError whose what() is one line:
//   "FILE:LINE:COL: KEY: what was expected, found what"
//   "--set KEY=VALUE: what was expected, found what"
// Nothing here runs or opens a dataset; a Plan is complete before any run.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"

namespace xrun {

// One problem in an experiment file or a --set override. what() is the full
// one-line message; the fields say where. For --set problems file is "--set"
// and line = column = 0; for problems with no place in the file (missing
// file, missing key, a default that breaks a rule) line = column = 0.
class ExperimentError : public std::runtime_error {
 public:
  ExperimentError(std::string file, int line, int column, std::string key, std::string message,
                  const std::string& what);
  std::string file;
  int line = 0;
  int column = 0;
  std::string key;      // dotted key the problem is about ("" for syntax errors)
  std::string message;  // the message without the location prefix
};

struct PlanOptions {
  std::vector<std::string> sets;  // "KEY=VALUE", applied in order before the sweep expands
  bool gpu_available = false;     // train.device = "auto" resolves to "cuda:0" when true, else "cpu"
  // Where a GPU is present but cannot train here, why (gpu_unusable_reason):
  // each run whose "auto" resolves to the CPU says so.
  std::string gpu_unusable;
  std::string hostname;           // store.label = "" resolves to this
  // This CPU's bf16 kernels (CpuInfo::bf16_kernels: "amx", "avx512_bf16",
  // "" for none) and oneDNN's ISA: precision "bf16" on the CPU is refused
  // where there are none.
  std::string cpu_bf16_kernels;
  std::string cpu_isa = "unknown";
  // xrun run --parallel: train.threads = 0 (all cores) on a CPU run resolves
  // to this share of the cores (0: left as 0).
  int cpu_threads_per_run = 0;
  // Optional extra check per run: returns "" when `device` can run `resolved`,
  // else a reason ("no CUDA device 1 on this machine"). Called once per run.
  std::function<std::string(const nlohmann::json& resolved, const std::string& device)> device_check;
};

struct RunSpec {
  int index = 0;                // 0-based, as `xrun plan` prints it
  nlohmann::json config;        // resolved: every key of the schema filled in
  std::string canonical;        // sorted-key compact JSON of `config`
  std::string config_hash;      // 16 hex: config without store.path, description
  std::string experiment_hash;  // 16 hex: also without train.device, store.label, data.path
  std::vector<std::pair<std::string, nlohmann::json>> swept;  // this run's axis values, axis order
  std::map<std::string, std::string> params;  // every leaf: dotted key -> canonical JSON text
  // train.device = "auto" resolved to the CPU while a GPU is present: why
  // (said when the run starts and stored with it); "" otherwise.
  std::string device_note;
};

struct Plan {
  std::string file;         // as given (or the display name)
  std::string name;         // experiment name
  std::string description;
  std::string mode;         // "grid" | "zip"
  std::vector<std::string> axes;     // swept keys, in file order (--set axes after)
  std::vector<std::string> notices;  // e.g. an axis dropped because --set fixed its key
  std::vector<RunSpec> runs;
};

// Reads, validates and expands an experiment file. Throws ExperimentError.
Plan load_plan(const std::string& path, const PlanOptions& options);
// The bytes of the experiment file at `path`, read once (a FIFO or
// /dev/fd/N can only be read once): what load_plan parses. Throws
// ExperimentError as load_plan does for a file it cannot read.
std::string read_experiment_text(const std::string& path);
// The same from TOML text; display_name stands for the file in messages.
Plan load_plan_from_string(const std::string& toml_text, const std::string& display_name,
                           const PlanOptions& options);

// The runs `only` names (`--only`), in that order, each once; every run when
// `only` is empty. Returns "" or what is wrong ("--only 7: FILE plans runs
// 0..5"), and then `selected` is left empty.
std::string select_runs(const Plan& plan, const std::vector<int>& only,
                        std::vector<const RunSpec*>& selected);

// Maps a resolved config (RunSpec::config) to the engine's typed config.
RunConfig to_run_config(const nlohmann::json& resolved);

// A run's swept settings as KEY=VALUE words ("train.batch_size=32 train.precision=fp16").
std::string swept_text(const RunSpec& run);

// `xrun plan` output: a table for people, or a JSON object when json is true.
std::string format_plan(const Plan& plan, bool json);

// The key reference (Markdown) generated from the schema; the reference part
// of docs/experiment-format.md is exactly this text (`xrun keys`).
std::string schema_markdown();

// Canonical text of a JSON value: sorted keys, compact.
std::string canonical_json(const nlohmann::json& value);
// 64-bit FNV-1a of text as 16 lowercase hex digits.
std::string fnv1a_hex(const std::string& text);
// First 8 hex digits of a hash.
std::string short_hash(const std::string& hash);
// The settings the experiment hash leaves out, so that the same experiment
// on another machine, label or data directory has the same hash:
// store.path, description, train.device, store.label, data.path.
const std::vector<std::string>& experiment_hash_excluded_keys();

}  // namespace xrun
