// store/sqlite_util.cpp: return-code checking, prepared statements,
// immediate transactions, schema look-ups and the backup API over the SQLite
// C API (see sqlite_util.h).
#include "store/sqlite_util.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>

namespace xrun::store::detail {

// What a failure means to a user, for the codes a user can cause and fix.
const char* plain_reason(int extended_code) {
  switch (extended_code & 0xff) {
    case SQLITE_READONLY: return "the store cannot be written (a read-only file or directory?): ";
    case SQLITE_FULL: return "the disk is full: ";
    case SQLITE_CANTOPEN: return "the file cannot be opened (a directory, or a missing folder?): ";
    case SQLITE_IOERR: return "an I/O error (disk full or failing?): ";
    case SQLITE_CORRUPT: return "the store is corrupt: ";
    case SQLITE_NOTADB: return "not an SQLite database: ";
    case SQLITE_BUSY: return "another process holds the store locked for too long: ";
    default: return "";
  }
}

[[noreturn]] void fail(sqlite3* db, const std::string& file, std::string_view sql) {
  std::string msg = file + ": ";
  if (db) msg += plain_reason(sqlite3_extended_errcode(db));
  msg += db ? sqlite3_errmsg(db) : "out of memory";
  if (db) msg += " (sqlite error " + std::to_string(sqlite3_extended_errcode(db)) + ")";
  if (!sql.empty()) {
    msg += " in: ";
    msg += sql;
  }
  throw StoreError(msg);
}

void check(int rc, sqlite3* db, const std::string& file, std::string_view sql) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
  fail(db, file, sql);
}

void exec(sqlite3* db, const std::string& file, const std::string& sql) {
  check(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), db, file, sql);
}

// --- Statement ------------------------------------------------------------------

Statement::Statement(sqlite3* db, const std::string& file, std::string sql)
    : db_(db), file_(file), sql_(std::move(sql)) {
  check(sqlite3_prepare_v2(db_, sql_.c_str(), -1, &stmt_, nullptr), db_, file_, sql_);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, int64_t value) {
  check(sqlite3_bind_int64(stmt_, index, value), db_, file_, sql_);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (std::isnan(value)) return bind_null(index);
  check(sqlite3_bind_double(stmt_, index, value), db_, file_, sql_);
  return *this;
}

Statement& Statement::bind(int index, const std::string& value) {
  check(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                          SQLITE_TRANSIENT),
        db_, file_, sql_);
  return *this;
}

Statement& Statement::bind(int index, const std::optional<std::string>& value) {
  return value ? bind(index, *value) : bind_null(index);
}

Statement& Statement::bind_null(int index) {
  check(sqlite3_bind_null(stmt_, index), db_, file_, sql_);
  return *this;
}

Statement& Statement::bind_column(int index, const Statement& from, int column) {
  check(sqlite3_bind_value(stmt_, index, sqlite3_column_value(from.stmt_, column)), db_, file_,
        sql_);
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // Keep the error message before reset() can replace it.
  std::string keep_sql = sql_;
  sqlite3_reset(stmt_);
  fail(db_, file_, keep_sql);
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

ColumnType Statement::type(int column) const {
  switch (sqlite3_column_type(stmt_, column)) {
    case SQLITE_INTEGER: return ColumnType::integer;
    case SQLITE_FLOAT: return ColumnType::real;
    case SQLITE_TEXT: return ColumnType::text;
    case SQLITE_BLOB: return ColumnType::blob;
    default: return ColumnType::null;
  }
}

bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::real(int column) const {
  if (is_null(column)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

// --- Transaction ----------------------------------------------------------------

Transaction::Transaction(sqlite3* db, const std::string& file)
    : db_(db), file_(file), nested_(sqlite3_get_autocommit(db) == 0) {
  exec(db_, file_, nested_ ? "SAVEPOINT xrun_nested" : "BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (!open_) return;
  if (nested_) {
    sqlite3_exec(db_, "ROLLBACK TO xrun_nested; RELEASE xrun_nested", nullptr, nullptr, nullptr);
  } else {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void Transaction::commit() {
  exec(db_, file_, nested_ ? "RELEASE xrun_nested" : "COMMIT");
  open_ = false;
}

// --- Schema look-ups and copies ---------------------------------------------------

std::string quote_identifier(const std::string& name) {
  std::string q = "\"";
  for (char c : name) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string identifier_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + quote_identifier(n);
  return out;
}

std::vector<std::string> table_columns(sqlite3* db, const std::string& file,
                                       const std::string& table) {
  Statement st(db, file, "SELECT name FROM pragma_table_info(?1) ORDER BY cid");
  st.bind(1, table);
  std::vector<std::string> columns;
  while (st.step()) columns.push_back(st.text(0));
  return columns;
}

bool has_rowid(sqlite3* db, const std::string& file, const std::string& table) {
  Statement st(db, file, "SELECT type, upper(sql) FROM sqlite_master WHERE name = ?1");
  st.bind(1, table);
  if (!st.step() || st.text(0) != "table") return false;
  return st.text(1).find("WITHOUT ROWID") == std::string::npos;
}

sqlite3* backup_open(sqlite3* source, const std::string& source_file,
                     const std::string& dest_path) {
  sqlite3* dest = nullptr;
  int rc = sqlite3_open_v2(dest_path.c_str(), &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                           nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = dest_path + ": cannot create a copy of " + source_file + " (" +
                            (dest ? sqlite3_errmsg(dest) : "out of memory") + ")";
    sqlite3_close_v2(dest);
    throw StoreError(msg);
  }
  sqlite3_backup* backup = sqlite3_backup_init(dest, "main", source, "main");
  if (backup) {
    sqlite3_backup_step(backup, -1);
    rc = sqlite3_backup_finish(backup);  // the first error of the copy, if any
  } else {
    rc = sqlite3_errcode(dest);
  }
  if (rc != SQLITE_OK) {
    const std::string msg = source_file + ": copying it to " + dest_path + " failed (" +
                            sqlite3_errmsg(dest) + ")";
    sqlite3_close_v2(dest);
    throw StoreError(msg);
  }
  sqlite3_extended_result_codes(dest, 1);
  return dest;
}

void backup_database(sqlite3* source, const std::string& source_file,
                     const std::string& dest_path) {
  sqlite3_close_v2(backup_open(source, source_file, dest_path));
}

}  // namespace xrun::store::detail
