// runner/output.h: what the query subcommands (runs, show, compare, report,
// export) share: opening an existing store, --where parsing, number
// formatting, CSV quoting and the JSON form of a run row.
#pragma once

#include <cstdint>
#include <memory>
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

// Opens an existing store for reading; a missing file is an error (printed),
// not a new store.
bool open_existing(const std::string& path, std::unique_ptr<store::Store>& db);

nlohmann::json number_or_null(double v);
std::string fixed(double v, int digits);  // "-" for NaN/inf
std::string mib(int64_t bytes);           // "123 MiB", "-" for 0
std::string csv_field(const std::string& s);
nlohmann::json run_json(const store::RunInfo& r);

}  // namespace xrun::cli
