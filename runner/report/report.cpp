// runner/report/report.cpp: the report page: its stylesheet, the header, the
// runs table, the environment of each machine, the chart sections put
// together (report_charts.cpp), and writing the file.
#include "runner/report/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "runner/report/report_sections.h"
#include "runner/report/svg_chart.h"

namespace xrun::report {

namespace sections {

std::string card(const std::string& id, const std::string& title, const std::string& lead,
                 const std::string& body) {
  return "<section class=\"card\" id=\"" + escape(id) + "\"><h2>" + escape(title) + "</h2>" +
         (lead.empty() ? "" : "<p class=\"lead\">" + escape(lead) + "</p>") + body + "</section>";
}

namespace {

std::string cell(const std::string& text, const char* cls = nullptr) {
  return std::string(cls ? "<td class=\"" + std::string(cls) + "\">" : "<td>") + escape(text) +
         "</td>";
}

std::string number_cell(double v, const std::string& text) {
  return cell(std::isfinite(v) && v != 0 ? text : "-", "num");
}

std::string header_row(const std::vector<std::pair<const char*, bool>>& columns) {
  std::string out = "<tr>";
  for (const auto& [name, numeric] : columns)
    out += std::string(numeric ? "<th class=\"num\">" : "<th>") + escape(name) + "</th>";
  return out + "</tr>";
}

// "2025-01-31T12:00:00.000Z" -> "2025-01-31 12:00".
std::string started(const std::string& iso) {
  std::string s = iso.substr(0, 16);
  if (s.size() > 10 && s[10] == 'T') s[10] = ' ';
  return s;
}

std::string run_row(const ReportRun& r) {
  const store::RunInfo& i = r.detail.info;
  const std::string swatch =
      "<td>" + legend_swatch({"", r.style, LegendEntry::Kind::line}) + "</td>";
  const std::string device = "<td title=\"" +
                             escape(i.device_name + (i.device.empty() ? "" : ", " + i.device)) +
                             "\">" + escape(short_device_name(i.device_name)) + "</td>";
  const std::string spread =
      i.step_ms_p10 > 0 ? short_number(i.step_ms_p10) + "–" + short_number(i.step_ms_p90) : "-";
  return "<tr>" + swatch + cell(run_tag(i.id), "num") + cell(i.uuid.substr(0, 8), "mono") +
         cell(i.label) + device +
         cell(i.batch_size > 0 ? std::to_string(i.batch_size) : "-", "num") + cell(i.precision) +
         "<td><span class=\"status " + escape(i.status) + "\">" + escape(i.status) +
         "</span></td>" + number_cell(i.throughput, short_number(i.throughput)) +
         number_cell(i.achieved_flops, short_number(i.achieved_flops / 1e12)) +
         number_cell(i.fraction_of_peak, short_number(100.0 * i.fraction_of_peak)) +
         number_cell(i.step_ms_median, short_number(i.step_ms_median)) + cell(spread, "num") +
         number_cell(i.test_accuracy, short_number(100.0 * i.test_accuracy)) +
         cell(started(i.started_at)) + "</tr>";
}

}  // namespace

std::string runs(const ReportData& data) {
  std::vector<const store::RunInfo*> infos;
  for (const ReportRun& r : data.runs) infos.push_back(&r.detail.info);
  const std::string unit = store::throughput_label(infos);
  std::string table = "<div class=\"scroll\"><table class=\"runs\"><thead>" +
                      header_row({{"", false},
                                  {"run", true},
                                  {"uuid", false},
                                  {"label", false},
                                  {"device", false},
                                  {"batch", true},
                                  {"precision", false},
                                  {"status", false},
                                  {unit.c_str(), true},
                                  {"TFLOP/s", true},
                                  {"% of peak", true},
                                  {"median ms", true},
                                  {"p10–p90 ms", true},
                                  {"test acc %", true},
                                  {"started (UTC)", false}}) +
                      "</thead><tbody>";
  for (const ReportRun& r : data.runs) table += run_row(r);
  table += "</tbody></table></div>";
  return card("runs", "Runs",
              "The colour of each run is its colour in the per-run charts below; names list what "
              "varies between runs.",
              table);
}

// --- Environment --------------------------------------------------------------------------

namespace {

struct Machine {
  std::string host, device_name;
  std::vector<const ReportRun*> runs;
};

std::vector<Machine> machines(const ReportData& data) {
  std::vector<Machine> out;
  for (const ReportRun& r : data.runs) {
    const std::string& device = r.detail.info.device_name;
    auto it = std::find_if(out.begin(), out.end(), [&](const Machine& m) {
      return m.host == r.detail.host && m.device_name == device;
    });
    if (it == out.end()) it = out.insert(out.end(), Machine{r.detail.host, device, {}});
    it->runs.push_back(&r);
  }
  return out;
}

// One key's value on a machine; where its runs disagree, each value with its runs.
std::string environment_value(const Machine& m, const std::string& key) {
  std::map<std::string, std::vector<int64_t>> values;
  for (const ReportRun* r : m.runs) {
    const auto it = r->detail.environment.fields.find(key);
    values[it == r->detail.environment.fields.end() ? "-" : it->second].push_back(
        r->detail.info.id);
  }
  if (values.size() == 1) return escape(values.begin()->first);
  std::string out;
  for (const auto& [value, runs] : values)
    out +=
        "<div>" + escape(value) + " <span class=\"runs-of\">(" + run_tags(runs) + ")</span></div>";
  return out;
}

// Environment keys whose value is not the same in every run.
std::set<std::string> differing_keys(const ReportData& data) {
  std::map<std::string, std::set<std::string>> values;
  for (const ReportRun& r : data.runs)
    for (const auto& [key, value] : r.detail.environment.fields) values[key].insert(value);
  std::set<std::string> out;
  for (const auto& kv : values) { const auto& key = kv.first; const auto& seen = kv.second;  // clang 14: no lambda capture of structured bindings
    const bool everywhere =
        std::all_of(data.runs.begin(), data.runs.end(),
                    [&](const ReportRun& r) { return r.detail.environment.fields.contains(key); });
    if (seen.size() > 1 || !everywhere) out.insert(key);
  }
  return out;
}

std::string machine_table(const Machine& m, const std::set<std::string>& differing) {
  std::set<std::string> keys;
  std::vector<int64_t> run_ids;
  for (const ReportRun* r : m.runs) {
    for (const auto& [key, value] : r->detail.environment.fields) keys.insert(key);
    run_ids.push_back(r->detail.info.id);
  }
  std::string out = "<div class=\"machine\"><h3>" +
                    escape(m.device_name.empty() ? "unknown device" : m.device_name) +
                    " <span class=\"host\">on " + escape(m.host.empty() ? "unknown host" : m.host) +
                    "</span></h3><p class=\"note\">" + escape("runs " + run_tags(run_ids)) +
                    "</p><table class=\"env\"><tbody>";
  for (const std::string& key : keys)
    out += std::string(differing.contains(key) ? "<tr class=\"differs\">" : "<tr>") + "<th>" +
           escape(key) + "</th><td>" + environment_value(m, key) + "</td></tr>";
  if (keys.empty()) out += "<tr><td>no environment stored</td></tr>";
  return out + "</tbody></table></div>";
}

}  // namespace

std::string environment(const ReportData& data) {
  const std::set<std::string> differing = differing_keys(data);
  std::string body = "<div class=\"grid two\">";
  for (const Machine& m : machines(data)) body += machine_table(m, differing);
  body += "</div>";
  return card("environment", "Environment",
              "What each machine reported (run_environment), grouped by host and device; "
              "values that are not the same in every run are in bold.",
              body);
}

}  // namespace sections

// --- The page ------------------------------------------------------------------------------

namespace {

const char* page_css() {
  return R"css(
* { box-sizing: border-box; }
body { margin: 0; background: #f3f4f6; color: #1f2328; font-size: 14px; line-height: 1.45;
       font-family: system-ui, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 24px; }
header.page { margin: 0 0 20px; }
header.page h1 { font-size: 24px; margin: 0 0 10px; }
dl.meta { display: flex; flex-wrap: wrap; gap: 6px 28px; margin: 0; }
dl.meta div { display: flex; gap: 8px; }
dl.meta dt { color: #6a737d; }
dl.meta dd { margin: 0; font-weight: 600; word-break: break-all; }
section.card { background: #fff; border: 1px solid #e1e4e8; border-radius: 10px;
               padding: 18px 20px 20px; margin: 0 0 20px; min-width: 0; }
section.card h2 { font-size: 17px; margin: 0 0 2px; }
section.card p.lead { color: #6a737d; margin: 0 0 14px; font-size: 13px; }
div.row { display: grid; grid-template-columns: 1fr 1fr; gap: 20px; margin: 0 0 20px; }
div.row > section.card { margin: 0; }
div.grid { display: grid; gap: 22px 24px; }
div.grid.two { grid-template-columns: repeat(2, minmax(0, 1fr)); }
div.grid.three { grid-template-columns: repeat(3, minmax(0, 1fr)); }
div.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 5px 8px; border-bottom: 1px solid #eef0f2; text-align: left; vertical-align: top; }
thead th { color: #6a737d; font-weight: 600; border-bottom: 1px solid #d0d7de; white-space: nowrap; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.mono { font-family: "DejaVu Sans Mono", monospace; font-size: 12px; }
tbody tr:hover { background: #f6f8fa; }
table.runs td { white-space: nowrap; }
table.runs svg.swatch { vertical-align: middle; }
span.status { padding: 1px 7px; border-radius: 9px; font-size: 12px; background: #eef0f2; }
span.status.complete { background: #dafbe1; color: #116329; }
span.status.failed { background: #ffebe9; color: #a40e26; }
span.status.interrupted, span.status.running { background: #fff8c5; color: #7d4e00; }
div.machine h3 { font-size: 14px; margin: 0; }
div.machine span.host { color: #6a737d; font-weight: 400; }
div.machine p.note { margin: 2px 0 8px; }
table.env th { width: 38%; color: #57606a; font-weight: 400; word-break: break-all; }
table.env td { word-break: break-word; }
table.env tr.differs td { font-weight: 600; }
span.runs-of { color: #6a737d; font-size: 12px; }
div.section-legend { margin: -4px 0 16px; }
footer { color: #6a737d; font-size: 12px; text-align: center; padding: 4px 0 16px; }
)css";
}

std::string filters_text(const ReportOptions& o) {
  std::string out;
  for (const auto& [key, value] : o.where) out += (out.empty() ? "" : ", ") + key + "=" + value;
  return out.empty() ? "none" : out;
}

std::string experiments_text(const ReportData& data) {
  std::set<std::string> names;
  for (const ReportRun& r : data.runs) names.insert(r.detail.info.experiment);
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string meta(const std::string& name, const std::string& value) {
  return "<div><dt>" + escape(name) + "</dt><dd>" + escape(value) + "</dd></div>";
}

std::string page_header(const ReportData& data) {
  size_t complete = 0;
  for (const ReportRun& r : data.runs) complete += r.detail.info.status == "complete";
  const analysis::Comparison& cmp = data.comparison;
  return "<header class=\"page\"><h1>xrun report</h1><dl class=\"meta\">" +
         meta("Store", data.store_path) + meta("Generated", data.generated_at) +
         meta("Runs",
              std::to_string(data.runs.size()) + " (" + std::to_string(complete) + " complete)") +
         meta("Experiments", experiments_text(data)) + meta("Filters", filters_text(data.options)) +
         meta("Speedup",
              "by " + cmp.by + (cmp.baseline.empty() ? "" : ", baseline " + cmp.baseline)) +
         "</dl></header>";
}

std::string row(const std::string& a, const std::string& b) {
  return "<div class=\"row\">" + a + b + "</div>";
}

}  // namespace

std::string render_report(const ReportData& data) {
  using namespace sections;
  return std::string("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>") +
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>" +
         "<title>xrun report: " + escape(data.store_path) + "</title><style>" + page_css() +
         chart_css() + "</style></head><body><main>" + page_header(data) + runs(data) +
         row(throughput(data), speedup(data)) + training(data) + convergence(data) + roofline(data) + step_times(data) + phases(data) +
         kernels(data) + environment(data) + "<footer>Written by xrun report from " +
         escape(data.store_path) + ".</footer></main></body></html>\n";
}

}  // namespace xrun::report
