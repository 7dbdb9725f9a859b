// runner/experiment.cpp: from an experiment file to a Plan. Reads the TOML,
// sorts every key and sweep axis into file order (TOML++ tables are
// name-ordered, so the order is recovered from source positions), checks each
// value against the schema, applies --set, expands the sweep (grid: first axis
// slowest; zip: element-wise) and resolves each run.
#include <algorithm>
#include <set>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>

#include <sys/stat.h>

#include <toml++/toml.h>

#include "runner/config_schema.h"
#include "runner/experiment_detail.h"

namespace xrun {

using nlohmann::json;

ExperimentError::ExperimentError(std::string file_, int line_, int column_, std::string key_,
                                 std::string message_, const std::string& what)
    : std::runtime_error(what),
      file(std::move(file_)),
      line(line_),
      column(column_),
      key(std::move(key_)),
      message(std::move(message_)) {}

namespace detail {

void fail(const Origin& o, const std::string& key, const std::string& message, bool key_in_message) {
  if (!o.set.empty())
    throw ExperimentError("--set", 0, 0, key, message, "--set " + o.set + ": " + message);
  std::string where = o.file;
  if (o.line > 0) where += ":" + std::to_string(o.line) + ":" + std::to_string(o.column);
  std::string what = where + ": " + (key_in_message || key.empty() ? "" : key + ": ") + message;
  throw ExperimentError(o.file, o.line, o.column, key, message, what);
}

}  // namespace detail

namespace {

using detail::fail;
using detail::Origin;
using detail::Setting;
using detail::Settings;

constexpr size_t kMaxRuns = 10000;
// Largest experiment file read: real ones are a few KiB.
constexpr size_t kMaxExperimentBytes = size_t{1} << 20;
const std::string kSweep = "sweep";

// A sweep axis: a run key and its values, each with its origin.
struct Axis {
  std::string key;
  Origin origin;  // of the list
  std::vector<Setting> values;
};

// One thing found in the file, to be handled in file order.
struct Item {
  enum Kind { setting, axis, problem } kind;
  int line, column;
  std::string key;  // dotted key (for axes: the run key, without "sweep.")
  const toml::node* node = nullptr;
  std::string message;  // problem: the message
  bool key_in_message = false;
};

std::string join(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?";
}

// The first key of a section, for examples in messages.
std::string first_key_in(const std::string& section) {
  for (auto& k : schema::keys())
    if (k.key.rfind(section + ".", 0) == 0) return k.key;
  return section;
}

// Collects the leaves of `table` (path `prefix`) as Items; `in_sweep` when
// inside [sweep], where leaves are axes and `prefix` excludes "sweep".
void collect(const toml::table& table, const std::string& prefix, bool in_sweep, std::vector<Item>& items) {
  for (auto&& kv : table) { const auto& k = kv.first; const auto& v = kv.second;  // clang 14: no lambda capture of structured bindings
    const auto& kpos = k.source().begin;
    const auto& vpos = v.source().begin;
    auto at_key = [&](std::string key, std::string msg, bool in_msg) {
      items.push_back({Item::problem, int(kpos.line), int(kpos.column), std::move(key), &v, std::move(msg), in_msg});
    };
    auto at_value = [&](std::string key, std::string msg) {
      items.push_back({Item::problem, int(vpos.line), int(vpos.column), std::move(key), &v, std::move(msg), false});
    };
    const std::string name(k.str());
    const std::string path = join(prefix, name);
    const std::string full = in_sweep ? join(kSweep, path) : path;
    if (name.empty() || name.find('.') != std::string::npos) {
      at_key(full, "unknown key \"" + name + "\" (a quoted key); write dotted keys without quotes", true);
      continue;
    }
    if (!in_sweep) {
      if (path == kSweep) {
        if (auto* t = v.as_table()) collect(*t, "", true, items);
        else at_value(path, "expected a table of sweep axes ([sweep]), found " + schema::describe_node(v, true));
      } else if (schema::find(path)) {
        items.push_back({Item::setting, int(vpos.line), int(vpos.column), path, &v, "", false});
      } else if (schema::is_section(path)) {
        if (auto* t = v.as_table()) collect(*t, path, false, items);
        else at_value(path, "expected a table ([" + path + "]), found " + schema::describe_node(v, true));
      } else if (v.is_table()) {
        at_key(path, "unknown table '" + path + "'" + did_you_mean(schema::suggest(path, true)), true);
      } else {
        at_key(path, "unknown key '" + path + "'" + did_you_mean(schema::suggest(path, false)), true);
      }
      continue;
    }
    // Inside [sweep]: "mode", or axes named by run keys.
    const auto* spec = schema::find(path);
    if (path == "mode") {
      items.push_back({Item::setting, int(vpos.line), int(vpos.column), full, &v, "", false});
    } else if (spec && spec->run_setting) {
      if (!spec->sweepable) at_key(full, "'" + path + "' cannot be swept (it is not a run setting)", false);
      else items.push_back({Item::axis, int(kpos.line), int(kpos.column), path, &v, "", false});
    } else if (schema::is_section(path) && path.rfind(kSweep, 0) != 0) {
      if (auto* t = v.as_table()) collect(*t, path, true, items);
      else at_key(full, "a sweep axis names a key, and '" + path + "' is a table; name a key in it, e.g. '" +
                            first_key_in(path) + "'", false);
    } else {
      at_key(full, "unknown key '" + path + "' in [sweep]" + did_you_mean(schema::suggest(path, false, true)),
             true);
    }
  }
}

Origin node_origin(const std::string& file, const toml::node& n) {
  return Origin{file, int(n.source().begin.line), int(n.source().begin.column), ""};
}

// Checks one value against its key; problems point at the node at fault
// (file) or at the --set argument.
Setting checked(const schema::KeySpec& spec, const toml::node& n, const std::string& error_key, const Origin& base) {
  try {
    return Setting{schema::check_value(spec, n), base.set.empty() ? node_origin(base.file, n) : base};
  } catch (const schema::ValueProblem& p) {
    fail(base.set.empty() ? node_origin(base.file, *p.at) : base, error_key, p.message);
  }
}

// Checks an axis list: a non-empty list whose elements are values of `spec`.
Axis checked_axis(const schema::KeySpec& spec, const toml::node& n, const Origin& base) {
  const std::string key = join(kSweep, spec.key);
  Origin list_origin = base.set.empty() ? node_origin(base.file, n) : base;
  auto* a = n.as_array();
  if (!a)
    fail(list_origin, key, "expected a list of values to sweep (" + schema::expected_text(spec) + "), found " +
                               schema::describe_node(n, true));
  if (a->empty()) fail(list_origin, key, "expected at least one value to sweep, found an empty list");
  Axis axis{spec.key, list_origin, {}};
  for (auto& e : *a) axis.values.push_back(checked(spec, e, key, base));
  return axis;
}

// A --set value: TOML, or a bare word taken as a string ("fp16", "cuda:0").
bool bare_word(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::strchr("_-.:/+~@%", c) != nullptr;
  });
}

class Loader {
 public:
  Loader(std::string file, const PlanOptions& options) : file_(std::move(file)), options_(options) {}

  Plan load(const toml::table& root) {
    read_file(root);
    apply_sets();
    return expand();
  }

 private:
  void read_file(const toml::table& root) {
    std::vector<Item> items;
    collect(root, "", false, items);
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return std::tie(a.line, a.column) < std::tie(b.line, b.column); });
    const Origin base{file_, 0, 0, ""};
    for (auto& item : items) {
      switch (item.kind) {
        case Item::problem:
          fail(Origin{file_, item.line, item.column, ""}, item.key, item.message, item.key_in_message);
        case Item::setting:
          settings_[item.key] = checked(*schema::find(item.key), *item.node, item.key, base);
          break;
        case Item::axis:
          axes_.push_back(checked_axis(*schema::find(item.key), *item.node, base));
          break;
      }
    }
  }

  void apply_sets() {
    std::vector<std::string> fixed;  // plain keys given by --set
    for (const std::string& arg : options_.sets) {
      const Origin o{"", 0, 0, arg};
      auto eq = arg.find('=');
      std::string key = eq == std::string::npos ? arg : arg.substr(0, eq);
      while (!key.empty() && key.back() == ' ') key.pop_back();
      while (!key.empty() && key.front() == ' ') key.erase(0, 1);
      if (eq == std::string::npos || key.empty()) fail(o, key, "expected KEY=VALUE");
      std::string text = arg.substr(eq + 1);
      while (!text.empty() && text.front() == ' ') text.erase(0, 1);
      while (!text.empty() && text.back() == ' ') text.pop_back();

      // Route the key first, so an unknown key is reported as such.
      const schema::KeySpec* spec = nullptr;
      bool axis = false;
      if (key.rfind(kSweep + ".", 0) == 0 && key != "sweep.mode") {
        std::string rel = key.substr(kSweep.size() + 1);
        spec = schema::find(rel);
        if (!spec || !spec->run_setting)
          fail(o, key, "unknown key '" + rel + "' in [sweep]" + did_you_mean(schema::suggest(rel, false, true)), true);
        if (!spec->sweepable) fail(o, key, "'" + rel + "' cannot be swept (it is not a run setting)");
        axis = true;
      } else {
        spec = schema::find(key);
        if (!spec) fail(o, key, "unknown key '" + key + "'" + did_you_mean(schema::suggest(key, false)), true);
      }

      toml::table parsed;
      const toml::node* value = nullptr;
      toml::value<std::string> word(text);
      try {
        parsed = toml::parse("v = " + text, std::string_view("--set"));
        if (parsed.size() != 1 || !parsed.contains("v")) fail(o, key, "expected one value after '='");
        value = parsed.get("v");
      } catch (const toml::parse_error& e) {
        if (!bare_word(text))
          fail(o, key, "cannot read the value as TOML (" + std::string(e.description()) +
                           "); put text in quotes: --set '" + key + "=\"...\"'");
        value = &word;
      }

      if (axis) {
        Axis a = checked_axis(*spec, *value, o);
        auto it = std::find_if(axes_.begin(), axes_.end(), [&](const Axis& x) { return x.key == a.key; });
        if (it != axes_.end()) *it = std::move(a);
        else axes_.push_back(std::move(a));
      } else {
        settings_[key] = checked(*spec, *value, key, o);
        if (spec->run_setting) fixed.push_back(key);
      }
    }
    // A key fixed by --set is not swept.
    for (auto it = axes_.begin(); it != axes_.end();) {
      auto set = std::find(fixed.begin(), fixed.end(), it->key);
      if (set == fixed.end()) {
        ++it;
        continue;
      }
      json values = json::array();
      for (auto& v : it->values) values.push_back(v.value);
      notices_.push_back("--set " + settings_[it->key].origin.set + " fixes " + it->key +
                         ", so its sweep axis " + schema::render(values) + " is dropped");
      it = axes_.erase(it);
    }
  }

  Plan expand() {
    if (!settings_.count("name"))
      fail(Origin{file_, 0, 0, ""}, "name", "required key missing; add name = \"...\" at the top of the file");
    Plan plan;
    plan.file = file_;
    plan.name = settings_["name"].value.get<std::string>();
    plan.description = settings_.count("description") ? settings_["description"].value.get<std::string>() : "";
    plan.mode = settings_.count("sweep.mode") ? settings_["sweep.mode"].value.get<std::string>() : "grid";
    plan.notices = notices_;
    for (auto& a : axes_) plan.axes.push_back(a.key);

    // Number of runs and, for zip, equal lengths.
    size_t count = 1;
    if (plan.mode == "zip" && !axes_.empty()) {
      count = axes_[0].values.size();
      for (auto& a : axes_)
        if (a.values.size() != count)
          fail(a.origin, join(kSweep, a.key),
               "zip axes need the same number of values: " + axes_[0].key + " has " + std::to_string(count) +
                   ", " + a.key + " has " + std::to_string(a.values.size()));
      if (count > kMaxRuns)
        fail(axes_[0].origin, join(kSweep, axes_[0].key),
             "the zip has " + std::to_string(count) + " runs, more than " + std::to_string(kMaxRuns) +
                 "; sweep fewer values");
    } else {
      for (auto& a : axes_) {
        count *= a.values.size();
        if (count > kMaxRuns)
          fail(a.origin, join(kSweep, a.key),
               "the grid has more than " + std::to_string(kMaxRuns) + " runs; sweep fewer values");
      }
    }

    for (size_t r = 0; r < count; ++r) {
      Settings run = settings_;
      run.erase("sweep.mode");
      RunSpec spec;
      spec.index = int(r);
      // Grid: mixed-radix digits of r, last axis fastest; zip: element r.
      size_t rest = r;
      std::vector<size_t> pick(axes_.size());
      for (size_t i = axes_.size(); i-- > 0;) {
        if (plan.mode == "zip") {
          pick[i] = r;
        } else {
          pick[i] = rest % axes_[i].values.size();
          rest /= axes_[i].values.size();
        }
      }
      for (size_t i = 0; i < axes_.size(); ++i) {
        const Setting& v = axes_[i].values[pick[i]];
        run[axes_[i].key] = v;
        spec.swept.emplace_back(axes_[i].key, v.value);
      }
      detail::RunContext ctx{file_, int(r), count > 1, &options_};
      spec.config = detail::resolve_run(run, ctx);
      spec.canonical = canonical_json(spec.config);
      spec.config_hash = detail::config_hash(spec.config);
      spec.experiment_hash = detail::experiment_hash(spec.config);
      spec.params = detail::flatten_params(spec.config);
      const auto device = run.find("train.device");
      const bool automatic = device == run.end() || device->second.value == "auto";
      if (automatic && !options_.gpu_unusable.empty() &&
          spec.config.at("train").at("device") == "cpu") {
        spec.device_note = "train.device = \"auto\" trains on the CPU although this machine has a "
                           "GPU: " + options_.gpu_unusable;
        if (plan.notices.empty() || plan.notices.back() != spec.device_note)
          plan.notices.push_back(spec.device_note);
      }
      plan.runs.push_back(std::move(spec));
    }
    return plan;
  }

  std::string file_;
  const PlanOptions& options_;
  Settings settings_;
  std::vector<Axis> axes_;
  std::vector<std::string> notices_;
};

}  // namespace

Plan load_plan_from_string(const std::string& toml_text, const std::string& display_name,
                           const PlanOptions& options) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(display_name));
  } catch (const toml::parse_error& e) {
    const auto& pos = e.source().begin;
    fail(Origin{display_name, int(pos.line), int(pos.column), ""}, "",
         "TOML syntax error: " + std::string(e.description()));
  }
  return Loader(display_name, options).load(root);
}

std::string select_runs(const Plan& plan, const std::vector<int>& only,
                        std::vector<const RunSpec*>& selected) {
  selected.clear();
  const int n = static_cast<int>(plan.runs.size());
  if (only.empty()) {
    for (const RunSpec& r : plan.runs) selected.push_back(&r);
    return "";
  }
  std::set<int> seen;
  for (int i : only) {
    if (i < 0 || i >= n) {
      selected.clear();
      return "--only " + std::to_string(i) + ": " + plan.file + " plans runs 0.." +
             std::to_string(n - 1);
    }
    if (seen.insert(i).second) selected.push_back(&plan.runs[static_cast<size_t>(i)]);
  }
  return "";
}

std::string read_experiment_text(const std::string& path) {
  const Origin at{path, 0, 0, ""};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(at, "", std::string("cannot read the experiment file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(at, "", "is a directory, not an experiment file (give the .toml file)");
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    fail(at, "", "is not a regular file (a device or socket); give the .toml file");
  std::string text;
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(at, "", std::string("cannot read the experiment file: ") + std::strerror(errno));
  // Read at most one byte past the cap: a huge file (or a pipe that never
  // ends) is refused without being held in memory.
  char buf[65536];
  size_t n;
  while (text.size() <= kMaxExperimentBytes &&
         (n = std::fread(buf, 1, std::min(sizeof buf, kMaxExperimentBytes + 1 - text.size()), f)) > 0)
    text.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err) fail(at, "", std::string("cannot read the experiment file: ") + std::strerror(err));
  if (text.size() > kMaxExperimentBytes)
    fail(at, "", "the file is larger than " + std::to_string(kMaxExperimentBytes >> 10) +
                     " KiB; an experiment file is a short TOML file (is this the right file?)");
  return text;
}

Plan load_plan(const std::string& path, const PlanOptions& options) {
  return load_plan_from_string(read_experiment_text(path), path, options);
}

}  // namespace xrun
