// runner/report/report_data.cpp: see report_data.h. A run's name lists the
// values of what varies across the reported runs (device, label, settings),
// leaving out a varying key that only mirrors another one (a label per
// machine beside the machine's device name).
#include "runner/report/report_data.h"

#include <time.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace xrun::report {

std::string run_tag(int64_t id) { return std::string("#").append(std::to_string(id)); }

std::string run_tags(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ", ") + run_tag(id);
  return out;
}

std::string short_device_name(const std::string& device_name) {
  std::string s = device_name;
  for (const char* vendor : {"NVIDIA ", "GeForce "})
    if (s.rfind(vendor, 0) == 0) s.erase(0, std::string_view(vendor).size());
  return s.empty() ? device_name : s;
}

std::string setting_text(const std::string& key, const std::string& value) {
  const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return value;
  if (j.is_string()) return j.get<std::string>();
  const auto dot = key.rfind('.');
  return (dot == std::string::npos ? key : key.substr(dot + 1)) + "=" +
         j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// One way runs can differ: a value per run, and how a name shows it.
struct Dimension {
  std::vector<std::string> values;  // by run
  std::vector<std::string> shown;   // by run; "" = not shown
};

// Settings that never tell runs apart in a name: the device is named by
// device_name, the label by the label column, the rest are paths and prose.
bool naming_setting(const std::string& key) {
  static const std::set<std::string> skipped = {"train.device", "store.label", "store.path",
                                                "data.path",    "description", "name"};
  return !skipped.contains(key);
}

// Device name, label, experiment, then every setting, in that order.
std::vector<Dimension> dimensions(const std::vector<ReportRun>& runs) {
  std::vector<Dimension> dims(3);
  std::set<std::string> keys;
  for (const ReportRun& r : runs) {
    const store::RunInfo& info = r.detail.info;
    dims[0].values.push_back(info.device_name);
    dims[0].shown.push_back(short_device_name(info.device_name));
    dims[1].values.push_back(info.label);
    dims[1].shown.push_back(info.label);
    dims[2].values.push_back(info.experiment);
    dims[2].shown.push_back(info.experiment);
    for (const auto& [key, value] : r.detail.params)
      if (naming_setting(key)) keys.insert(key);
  }
  for (const std::string& key : keys) {
    Dimension d;
    for (const ReportRun& r : runs) {
      const auto it = r.detail.params.find(key);
      const std::string json = it == r.detail.params.end() ? "" : it->second;
      d.values.push_back(json);
      d.shown.push_back(json.empty() ? "" : setting_text(key, json));
    }
    dims.push_back(std::move(d));
  }
  return dims;
}

bool varies(const Dimension& d) {
  return std::set<std::string>(d.values.begin(), d.values.end()).size() > 1;
}

// True when each value of a goes with one value of b and the other way round.
bool mirrors(const Dimension& a, const Dimension& b) {
  std::map<std::string, std::string> ab, ba;
  for (size_t i = 0; i < a.values.size(); ++i) {
    if (ab.emplace(a.values[i], b.values[i]).first->second != b.values[i]) return false;
    if (ba.emplace(b.values[i], a.values[i]).first->second != a.values[i]) return false;
  }
  return true;
}

// Now, for the report's header: "2025-01-31 12:00 UTC".
std::string utc_now() {
  const time_t now = time(nullptr);
  struct tm utc {};
  gmtime_r(&now, &utc);
  char buf[64];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &utc);
  return buf;
}

void name_runs(std::vector<ReportRun>& runs) {
  constexpr size_t kMaxParts = 4;
  std::vector<Dimension> chosen;
  for (Dimension& d : dimensions(runs)) {
    if (chosen.size() == kMaxParts || !varies(d)) continue;
    const bool redundant = std::any_of(chosen.begin(), chosen.end(),
                                       [&](const Dimension& c) { return mirrors(c, d); });
    if (!redundant) chosen.push_back(std::move(d));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string parts;
    for (const Dimension& d : chosen)
      if (!d.shown[i].empty()) parts += (parts.empty() ? " " : " · ") + d.shown[i];
    runs[i].name = run_tag(runs[i].detail.info.id) + parts;
    runs[i].style = i;
  }
}

}  // namespace

ReportData gather_report(const store::Store& db, const ReportOptions& options) {
  ReportData data;
  data.store_path = db.path();
  data.generated_at = options.generated_at.empty() ? utc_now() : options.generated_at;
  data.options = options;
  for (const store::RunInfo& info : db.list_runs(options.where)) {
    ReportRun r;
    auto detail = db.get_run(info.uuid);
    if (!detail) continue;  // deleted since listed
    r.detail = std::move(*detail);
    r.steps = db.get_steps(info.uuid);
    data.runs.push_back(std::move(r));
  }
  name_runs(data.runs);
  data.comparison.by = options.by;
  if (data.runs.empty()) return data;  // nothing to compare
  analysis::CompareOptions compare;
  compare.by = options.by;
  compare.baseline = options.baseline;
  compare.where = options.where;
  data.comparison = analysis::compare_runs(db, compare);
  return data;
}

}  // namespace xrun::report
