// runner/output.h: what the query subcommands (runs, show, compare, report,
// export) share: opening an existing store, --where parsing, number
// formatting, CSV quoting and the JSON form of a run row.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace xrun::cli {

using Filters = std::vector<std::pair<std::string, std::string>>;

// "KEY=VALUE" strings -> filters; prints "--where X: expected KEY=VALUE" and
// returns false on the first malformed one.
bool parse_where(const std::vector<std::string>& where, Filters& out);

// Each filter's key is a run column or a setting (of the schema, or stored
// in `db`); otherwise prints "unknown key" with the closest known one and
// returns false (exit 2: a typo must not silently match nothing).
bool check_where_keys(const store::Store& db, const Filters& filters);

// Opens an existing store for reading; a missing file is an error (printed),
// not a new store.
bool open_existing(const std::string& path, std::unique_ptr<store::Store>& db);

// JSON text of `j`; invalid UTF-8 in stored text (another program's bytes)
// becomes U+FFFD instead of an exception.
std::string json_text(const nlohmann::json& j, int indent = -1);

nlohmann::json number_or_null(double v);
std::string fixed(double v, int digits);  // "-" for NaN/inf
std::string mib(int64_t bytes);           // "123 MiB", "-" for 0
// A FLOP count or rate with its prefix and unit: "24.59 GFLOP", "1.23 TFLOP/s"
// (unit "FLOP" or "FLOP/s"); "-" for NaN.
std::string flops_text(double v, const std::string& unit);
// `show` and `trace`: checks `ref` (run_ref_problem), opens the store
// read-only and finds the run, printing what went wrong. Returns the exit
// code: kOk with `db` and `run` set, kUsage or kRunFailed.
int open_run(const std::string& db_path, const std::string& ref, const char* command,
             std::unique_ptr<store::Store>& db, std::optional<store::RunDetail>& run);

// "" when `ref` can name a run (an id, or a UUID prefix of at least 4 hex
// characters); otherwise the message for a usage error.
std::string run_ref_problem(const std::string& ref);

// A CSV cell (RFC 4180 quoting); text a spreadsheet would take for a formula
// (=, +, -, @, tab, CR first, and not a number) gets a leading ' .
std::string csv_field(const std::string& s);
// `s` safe to print on a terminal: control characters (C0, DEL and C1) and
// bytes that are not UTF-8 become visible escapes (\e, \n, \t, \r, \xNN,
// \u009b), so stored text (a label, an error, a merged store's device name)
// cannot move the cursor, retitle the window or hide what follows. Text of
// any script passes as it is. `keep_newlines`: "\n" stays a line break (a
// whole report's text). For table, text and Markdown output; CSV and JSON
// escape in their own way and are left alone.
std::string terminal_text(const std::string& s, bool keep_newlines = false);
// Terminal columns `s` takes (UTF-8; wide East Asian characters count 2).
size_t display_width(const std::string& s);
// `s` cut to at most `width` columns on a character boundary, then padded
// with spaces to exactly `width` columns: for aligned tables of any text.
std::string fit(const std::string& s, size_t width);
nlohmann::json run_json(const store::RunInfo& r);

}  // namespace xrun::cli
