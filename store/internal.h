// store/internal.h: helpers shared by store.cpp and step_writer.cpp (and
// visible to the store tests). Not part of the store's interface.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "store/sqlite_util.h"
#include "store/store.h"

namespace xrun::store::detail {

std::string now_iso8601();  // "2025-01-31T12:00:00.000Z" (UTC)
std::string new_uuid();     // random version-4 UUID, lower-case
std::string host_name();    // gethostname(), "unknown" on failure

// run_params.value for a canonical JSON text: strings unquoted, null as
// nullopt, other values as JSON writes them; text that is not JSON as given.
std::optional<std::string> plain_value(const std::string& json_text);

const char* step_kind_name(StepKind k);
StepKind step_kind_from(const std::string& s);

// The integer id of the run with this UUID; throws StoreError when none.
int64_t run_id(sqlite3* db, const std::string& file, const std::string& uuid);

// Inserts steps of run `run`; the caller holds the transaction. `reuse` is a
// statement prepared from kInsertStepSql to reuse, or null to prepare one.
extern const char* const kInsertStepSql;
void insert_steps(sqlite3* db, const std::string& file, int64_t run,
                  std::span<const StepRecord> steps, Statement* reuse);

}  // namespace xrun::store::detail
