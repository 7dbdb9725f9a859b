// runner/plan_format.cpp: `xrun plan` output. The table is for people: the
// experiment, sweep mode and axes, notices, the device, then one line per run
// with its short config hash and swept values, then the count. The JSON form
// carries the same plus each run's full resolved config.
#include <set>
#include <sstream>

#include "runner/config_schema.h"
#include "runner/experiment.h"

namespace xrun {

namespace {

// A swept value as `key=value`: strings bare, everything else as TOML would write it.
std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : schema::render(v);
}

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string format_table(const Plan& plan) {
  std::ostringstream o;
  o << "experiment: " << plan.name << "  (" << plan.file << ")\n";
  if (!plan.description.empty()) o << "  " << plan.description << "\n";
  if (plan.axes.empty()) {
    o << "sweep: none\n";
  } else {
    o << "sweep: " << plan.mode << " over ";
    for (size_t i = 0; i < plan.axes.size(); ++i) {
      std::set<std::string> distinct;
      for (auto& r : plan.runs) distinct.insert(r.swept[i].second.dump());
      o << (i ? (plan.mode == "zip" ? " + " : " x ") : "") << plan.axes[i] << " (" << distinct.size() << ")";
    }
    o << "\n";
  }
  std::set<std::string> devices, labels;
  for (auto& r : plan.runs) {
    devices.insert(r.config.at("train").at("device").get<std::string>());
    labels.insert(r.config.at("store").at("label").get<std::string>());
  }
  auto list = [](const std::set<std::string>& s) {
    std::string t;
    for (auto& x : s) t += (t.empty() ? "" : ", ") + (x.empty() ? std::string("\"\"") : x);
    return t;
  };
  o << "device: " << list(devices) << "  label: " << list(labels) << "\n";
  for (auto& n : plan.notices) o << "note: " << n << "\n";
  for (auto& r : plan.runs) {
    o << "  #" << r.index << "  " << short_hash(r.config_hash);
    for (auto& [k, v] : r.swept) o << (&k == &r.swept.front().first ? "  " : " ") << k << "=" << value_text(v);
    o << "\n";
  }
  o << plural(plan.runs.size(), "run", "runs") << "\n";
  return o.str();
}

std::string format_json(const Plan& plan) {
  nlohmann::json j;
  j["experiment"] = plan.name;
  j["description"] = plan.description;
  j["file"] = plan.file;
  j["mode"] = plan.mode;
  j["axes"] = plan.axes;
  j["notices"] = plan.notices;
  j["count"] = plan.runs.size();
  j["runs"] = nlohmann::json::array();
  for (auto& r : plan.runs) {
    nlohmann::json swept = nlohmann::json::object();
    for (auto& [k, v] : r.swept) swept[k] = v;
    j["runs"].push_back({{"index", r.index},
                         {"config_hash", r.config_hash},
                         {"experiment_hash", r.experiment_hash},
                         {"swept", swept},
                         {"config", r.config}});
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string format_plan(const Plan& plan, bool json) { return json ? format_json(plan) : format_table(plan); }

std::string schema_markdown() { return schema::markdown(); }

std::string swept_text(const RunSpec& r) {
  std::string s;
  for (const auto& [key, value] : r.swept) {
    if (!s.empty()) s += ' ';
    s += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return s;
}

}  // namespace xrun
