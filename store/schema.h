// store/schema.h: opening a store file and bringing its schema up to date.
// The schema itself (tables, columns, the run_summary view) is described at
// the top of schema.cpp. Internal to store/ and its tests.
#pragma once

#include <string>

#include "store/store.h"

namespace xrun::store::detail {

// xrun's PRAGMA application_id ('xrun' in ASCII): marks a file as an xrun store.
constexpr int kApplicationId = 0x7872756e;

// Number of the newest migration this build knows.
int latest_version();

// Opens (creating if absent) an xrun store at `path`: busy_timeout, WAL,
// foreign keys, then the forward migrations up to `target_version`, each in
// its own BEGIN IMMEDIATE transaction. Throws StoreError for a file that is
// not SQLite, a foreign SQLite database, or a schema newer than this build.
// The caller owns the returned handle (sqlite3_close_v2).
sqlite3* open_database(const std::string& path, int target_version);

// Opens an existing xrun store read-only, as it is: no WAL switch, no
// migration, nothing written. `version` receives its schema version. Throws
// StoreError for a file that is not SQLite, corrupt in its first page, empty,
// a foreign SQLite database, or newer than this build. The caller owns the
// handle (sqlite3_close_v2).
sqlite3* open_read_only(const std::string& path, int& version);

// Opens an existing store for the commands that only read (runs, show,
// trace, export, report, compare): as open_read_only (immutable where the
// directory is read-only), and an older schema is migrated forward in a
// private in-memory copy. The file is never written.
sqlite3* open_for_reading(const std::string& path);

// For tests of the migration path: a store file at exactly `version`
// (1..latest_version()), created or migrated forward, then closed.
void create_at_version(const std::string& path, int version);

// Milliseconds SQLite waits for another process's write lock.
constexpr int kBusyTimeoutMs = 10000;

}  // namespace xrun::store::detail
