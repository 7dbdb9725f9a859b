// engine/checkpoint/checkpoint.cpp: model and optimizer state <-> safetensors
// files, through the backend's canonical-layout read/write.
#include "engine/checkpoint/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "xrun_version.h"

namespace xrun {

namespace {

const char* kStepKey = "xrun.step";
const char* kConfigHashKey = "xrun.config_hash";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t step_of(const SafetensorsFile& f) {
  auto it = f.metadata().find(kStepKey);
  if (it == f.metadata().end())
    throw CheckpointError(f.path() + ": no '" + std::string(kStepKey) +
                          "' in its metadata: not an xrun checkpoint");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw CheckpointError(f.path() + ": metadata " + kStepKey + " = '" + it->second +
                          "' is not a number");
  }
}

}  // namespace

bool is_xrun_checkpoint(const std::string& path) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    return f.metadata().count(kStepKey) > 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::string checkpoint_file_problem(const std::string& path) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    return f.metadata().count(kStepKey) > 0 ? "" : "is not an xrun checkpoint";
  } catch (const CheckpointError& e) {
    // A cut-short file is named as such, with the sizes the reader found.
    const std::string what = e.what();
    const size_t at = what.find("truncated: ");
    if (at != std::string::npos) return "is " + what.substr(at);
    return "is not an xrun checkpoint";
  } catch (const std::exception&) {
    return "is not an xrun checkpoint";
  }
}

std::string checkpoint_config_hash(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  auto it = f.metadata().find(kConfigHashKey);
  return it == f.metadata().end() ? "" : it->second;
}

std::string optimizer_state_path(const std::string& path) {
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size()) + ".optim" + ext;
  return path + ".optim.safetensors";
}

void save_checkpoint(const std::string& path, const Model& model, Backend& backend,
                     OptimizerOp& optimizer, const CheckpointState& state) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", state.loss_scale);
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {kStepKey, std::to_string(state.step)},
      {"xrun.optimizer_steps", std::to_string(state.optimizer_steps)},
      {"xrun.loss_scale", scale},
      {"xrun.scaler_growth_tracker", std::to_string(state.scaler_growth_tracker)},
      {"xrun.arch", state.arch},
      {"xrun.version", XRUN_VERSION}};
  if (!state.config_hash.empty()) meta[kConfigHashKey] = state.config_hash;

  // Weights: torchvision's state_dict.
  std::vector<std::vector<float>> values;
  values.reserve(model.state().size());
  const int64_t counter = model.num_batches_tracked;
  std::vector<TensorView> views;
  for (const StateEntry& e : model.state()) {
    if (e.kind == StateEntry::Kind::counter) {
      views.push_back({e.name, "I64", {}, &counter, sizeof(counter)});
      continue;
    }
    values.emplace_back(e.tensor->numel());
    backend.read(e.tensor, values.back());
    views.push_back({e.name, "F32", e.dims, values.back().data(), values.back().size() * 4});
  }
  write_safetensors(path, views, meta);

  // Optimizer state: "<parameter>.<state>" per parameter and state.
  const std::vector<std::string> names = optimizer.state_names();
  std::vector<std::vector<float>> state_values;
  state_values.reserve(model.state().size() * names.size());
  std::vector<TensorView> state_views;
  for (const StateEntry& e : model.state()) {
    if (e.kind != StateEntry::Kind::parameter) continue;
    for (size_t i = 0; i < names.size(); ++i) {
      state_values.emplace_back(e.tensor->numel());
      optimizer.read_state(static_cast<int>(i), e.tensor, state_values.back());
      state_views.push_back({e.name + "." + names[i], "F32", e.dims, state_values.back().data(),
                             state_values.back().size() * 4});
    }
  }
  std::map<std::string, std::string> optim_meta = meta;
  optim_meta["xrun.optimizer_states"] = "";
  for (size_t i = 0; i < names.size(); ++i)
    optim_meta["xrun.optimizer_states"] += (i ? "," : "") + names[i];
  write_safetensors(optimizer_state_path(path), state_views, optim_meta);
}

void load_weights(const std::string& path, Model& model, Backend& backend) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> missing, wrong;
  for (const StateEntry& e : model.state()) {
    if (!file.contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    const auto& entry = file.get(e.name);
    const bool counter = e.kind == StateEntry::Kind::counter;
    const bool dtype_ok = counter ? (entry.dtype == "I64" && entry.numel() == 1)
                                  : entry.dtype == "F32";
    if (!counter && entry.shape != e.dims)
      wrong.push_back(e.name + " has shape " + shape_text(entry.shape) + ", expected " +
                      shape_text(e.dims));
    else if (!dtype_ok)
      wrong.push_back(e.name + " has dtype " + entry.dtype + ", expected " +
                      (counter ? "I64 scalar" : "F32"));
  }
  std::set<std::string> known;
  for (const StateEntry& e : model.state()) known.insert(e.name);
  // A tied weight (transformers keeps GPT-2's lm_head.weight in its
  // state_dict) is taken where it holds its twin's values.
  for (const Model::TiedWeight& t : model.tied_weights()) {
    if (!file.contains(t.name)) continue;
    known.insert(t.name);
    if (!file.contains(t.same_as)) continue;  // reported missing above
    const auto& tied = file.get(t.name);
    const auto& twin = file.get(t.same_as);
    std::vector<char> a(tied.bytes), b(twin.bytes);
    if (tied.bytes == twin.bytes) {
      tied.copy_to(a.data(), a.size());
      twin.copy_to(b.data(), b.size());
    }
    if (tied.dtype != twin.dtype || tied.shape != twin.shape || a != b)
      wrong.push_back(t.name + " differs from " + t.same_as + ", which the model ties it to");
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : file.names())
    if (!known.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::ostringstream msg;
    msg << path << " does not fit " << model.describe() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg << "\n  " << what << " (" << v.size() << "):";
      for (size_t i = 0; i < v.size() && i < 10; ++i) msg << " " << v[i] << (i + 1 < v.size() ? "," : "");
      if (v.size() > 10) msg << " ...";
    };
    list("missing tensors", missing);
    list("unexpected tensors", unexpected);
    list("mis-shaped tensors", wrong);
    throw CheckpointError(msg.str());
  }
  std::vector<float> values;
  for (const StateEntry& e : model.state()) {
    const auto& entry = file.get(e.name);
    if (e.kind == StateEntry::Kind::counter) {
      int64_t n = 0;
      entry.copy_to(&n, sizeof(n));
      model.num_batches_tracked = n;
      continue;
    }
    values.resize(entry.bytes / sizeof(float));
    entry.copy_to(values.data(), entry.bytes);
    backend.write(e.tensor, values);
  }
}

CheckpointState load_checkpoint(const std::string& path, Model& model, Backend& backend,
                                OptimizerOp& optimizer) {
  load_weights(path, model, backend);
  const SafetensorsFile weights = SafetensorsFile::open(path);
  const std::string optim_path = optimizer_state_path(path);
  if (!std::filesystem::exists(optim_path))
    throw CheckpointError(optim_path + ": missing; it holds the optimizer state that " + path +
                          " needs to resume");
  const SafetensorsFile optim = SafetensorsFile::open(optim_path);
  CheckpointState st;
  st.step = step_of(weights);
  const int64_t optim_step = step_of(optim);
  if (optim_step != st.step)
    throw CheckpointError(path + " is at step " + std::to_string(st.step) + " but " +
                          optim_path + " at step " + std::to_string(optim_step) +
                          " (a save was cut short?)");
  auto meta = [&](const char* key, const std::string& fallback) {
    auto it = optim.metadata().find(key);
    return it == optim.metadata().end() ? fallback : it->second;
  };
  st.arch = meta("xrun.arch", "");
  st.config_hash = meta(kConfigHashKey, "");
  try {
    st.optimizer_steps = std::stoll(meta("xrun.optimizer_steps", std::to_string(st.step)));
    st.loss_scale = std::stod(meta("xrun.loss_scale", "1"));
    st.scaler_growth_tracker = std::stoll(meta("xrun.scaler_growth_tracker", "0"));
  } catch (const std::exception&) {
    throw CheckpointError(optim_path + ": malformed optimizer metadata");
  }

  const std::vector<std::string> names = optimizer.state_names();
  std::vector<float> values;
  for (const StateEntry& e : model.state()) {
    if (e.kind != StateEntry::Kind::parameter) continue;
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string key = e.name + "." + names[i];
      if (!optim.contains(key))
        throw CheckpointError(optim_path + ": no tensor " + key +
                              " (saved with another optimizer?)");
      const auto& entry = optim.get(key);
      if (entry.dtype != "F32" || entry.shape != e.dims)
        throw CheckpointError(optim_path + ": " + key + " has dtype " + entry.dtype +
                              " and shape " + shape_text(entry.shape) + ", expected F32 " +
                              shape_text(e.dims));
      values.resize(entry.bytes / sizeof(float));
      entry.copy_to(values.data(), entry.bytes);
      optimizer.write_state(static_cast<int>(i), e.tensor, values);
    }
  }
  return st;
}

}  // namespace xrun
