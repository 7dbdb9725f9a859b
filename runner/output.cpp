// runner/output.cpp: see output.h.
#include "runner/output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "runner/commands.h"
#include "runner/config_schema.h"

namespace xrun::cli {

bool parse_where(const std::vector<std::string>& where, Filters& out) {
  for (const std::string& w : where) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "xrun: --where " << w << ": expected KEY=VALUE\n";
      return false;
    }
    out.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  return true;
}

bool check_where_keys(const store::Store& db, const Filters& filters) {
  if (filters.empty()) return true;
  std::vector<std::string> known = db.filter_keys();
  for (const schema::KeySpec& k : schema::keys())
    if (k.run_setting) known.push_back(k.key);
  for (const auto& [key, value] : filters) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::cerr << "xrun: --where " << key << "=" << value << ": unknown key '" << key << "'";
    const std::string near = schema::closest_name(key, known);
    if (!near.empty()) std::cerr << "; did you mean '" << near << "'?";
    std::cerr << " (a column: status, label, device, experiment, uuid, device_name, host, "
                 "config_hash, experiment_hash; or a setting such as train.batch_size)\n";
    return false;
  }
  return true;
}

using nlohmann::json;

std::string json_text(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string flops_text(double v, const std::string& unit) {
  if (!std::isfinite(v)) return "-";
  const char* prefix[] = {"", "k", "M", "G", "T", "P"};
  int p = 0;
  while (p < 5 && std::abs(v) >= 1000) v /= 1000, ++p;
  return fixed(v, 2) + " " + prefix[p] + unit;
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string mib(int64_t bytes) {
  return bytes > 0 ? fixed(static_cast<double>(bytes) / (1 << 20), 0) + " MiB" : "-";
}

namespace {

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// One code point of UTF-8 at s[i]: its value, and i moved past it (an
// invalid byte reads as itself, one byte long).
char32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + static_cast<size_t>(len) > s.size()) return static_cast<char32_t>(s[i++] & 0xff);
  char32_t cp = len == 1 ? b : b & (0x7f >> len);
  for (int k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  i += static_cast<size_t>(len);
  return cp;
}

// Terminal columns of a code point: 2 for East Asian wide and emoji ranges,
// 0 for combining marks, else 1.
int columns(char32_t c) {
  if ((c >= 0x300 && c <= 0x36f) || (c >= 0x200b && c <= 0x200f)) return 0;
  const bool wide = (c >= 0x1100 && c <= 0x115f) || (c >= 0x2e80 && c <= 0xa4cf) ||
                    (c >= 0xac00 && c <= 0xd7a3) || (c >= 0xf900 && c <= 0xfaff) ||
                    (c >= 0xfe30 && c <= 0xfe4f) || (c >= 0xff00 && c <= 0xff60) ||
                    (c >= 0xffe0 && c <= 0xffe6) || (c >= 0x1f300 && c <= 0x1f64f) ||
                    (c >= 0x1f900 && c <= 0x1f9ff) || (c >= 0x20000 && c <= 0x3fffd);
  return wide ? 2 : 1;
}

}  // namespace

std::string csv_field(const std::string& s) {
  // A text cell a spreadsheet would run as a formula gets a leading quote
  // (numbers such as -1.5 stay as they are).
  const bool formula = !s.empty() && std::strchr("=+-@\t\r", s[0]) != nullptr && !is_number(s);
  const std::string v = formula ? "'" + s : s;
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

int open_run(const std::string& db_path, const std::string& ref, const char* command,
             std::unique_ptr<store::Store>& db, std::optional<store::RunDetail>& run) {
  if (const std::string problem = run_ref_problem(ref); !problem.empty()) {
    std::cerr << "xrun: " << command << ": " << problem << "\n";
    return kUsage;
  }
  if (!open_existing(db_path, db)) return kRunFailed;
  run = db->get_run(ref);
  if (!run) {
    std::cerr << "xrun: no run '" << ref << "' in " << db_path << " (`xrun runs` lists them)\n";
    return kRunFailed;
  }
  return kOk;
}

std::string run_ref_problem(const std::string& ref) {
  const bool digits = !ref.empty() && ref.size() <= 18 &&
                      std::all_of(ref.begin(), ref.end(), [](char c) { return c >= '0' && c <= '9'; });
  const bool uuid_prefix = ref.size() >= 4 && ref.size() <= 36 &&
                           std::all_of(ref.begin(), ref.end(), [](char c) {
                             return std::isxdigit(static_cast<unsigned char>(c)) || c == '-';
                           });
  if (digits || uuid_prefix) return "";
  return "'" + ref + "' is not a run: give its id (a number) or at least the first 4 characters "
         "of its UUID; `xrun runs` lists them";
}

std::string terminal_text(const std::string& s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&](const char* prefix, unsigned v, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, v);
    out += buf;
  };
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (b == '\n' && keep_newlines) out += '\n';
      else if (b == 0x1b) out += "\\e";
      else if (b == '\n') out += "\\n";
      else if (b == '\t') out += "\\t";
      else if (b == '\r') out += "\\r";
      else if (b < 0x20 || b == 0x7f) hex("\\x", b, 2);
      else out += static_cast<char>(b);
      ++i;
      continue;
    }
    // A UTF-8 sequence, checked strictly: continuation bytes, no overlong
    // form (0xc0 0x9b would read as ESC to a lax decoder), no surrogate.
    const size_t len = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t cp = len ? b & (0x7f >> len) : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xc0) == 0x80;
      cp = cp << 6 | (c & 0x3f);
    }
    const char32_t least = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    ok = ok && cp >= least && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) {
      hex("\\x", b, 2);
      ++i;
    } else if (cp <= 0x9f) {  // C1 controls (0x9b is a one-byte CSI)
      hex("\\u", static_cast<unsigned>(cp), 4);
      i += len;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

size_t display_width(const std::string& s) {
  size_t width = 0;
  for (size_t i = 0; i < s.size();) width += static_cast<size_t>(columns(next_code_point(s, i)));
  return width;
}

std::string fit(const std::string& s, size_t width) {
  std::string out;
  size_t used = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const auto w = static_cast<size_t>(columns(next_code_point(s, i)));
    if (used + w > width) break;
    out.append(s, start, i - start);
    used += w;
  }
  return out + std::string(width - used, ' ');
}

json run_json(const store::RunInfo& r) {
  return {{"id", r.id},
          {"uuid", r.uuid},
          {"experiment", r.experiment},
          {"sweep_index", r.sweep_index},
          {"status", r.status},
          {"label", r.label},
          {"device", r.device},
          {"device_name", r.device_name},
          {"batch_size", r.batch_size},
          {"ranks", r.ranks},
          {"global_batch", r.global_batch},
          {"precision", r.precision},
          {"cudnn_benchmark", r.cudnn_benchmark},
          {"workers", r.workers},
          {"throughput", number_or_null(r.throughput)},
          {"throughput_unit", r.throughput_unit},
          {"step_ms_median", number_or_null(r.step_ms_median)},
          {"step_ms_p10", number_or_null(r.step_ms_p10)},
          {"step_ms_p90", number_or_null(r.step_ms_p90)},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"test_accuracy", number_or_null(r.test_accuracy)},
          {"final_loss", number_or_null(r.final_loss)},
          {"achieved_flops", number_or_null(r.achieved_flops)},
          {"peak_flops", number_or_null(r.peak_flops)},
          {"fraction_of_peak", number_or_null(r.fraction_of_peak)},
          {"config_hash", r.config_hash},
          {"experiment_hash", r.experiment_hash},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at},
          {"error", r.error}};
}

// Opens an existing store read-only; a missing file is an error, not a new store.
bool open_existing(const std::string& path, std::unique_ptr<store::Store>& db) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::cerr << "xrun: no result store at " << path << " (run an experiment, or pass --db)\n";
    return false;
  }
  if (std::filesystem::is_directory(path, ec)) {
    std::cerr << "xrun: " << path << " is a directory, not a result store file (pass --db FILE)\n";
    return false;
  }
  // SQLite's open would block on a FIFO until a writer came.
  if (!std::filesystem::is_regular_file(path, ec)) {
    std::cerr << "xrun: " << path << " is not a regular file (a FIFO, device or socket), not a "
              << "result store file (pass --db FILE)\n";
    return false;
  }
  db = std::make_unique<store::Store>(path, store::Store::Access::read_only);
  return true;
}


}  // namespace xrun::cli
