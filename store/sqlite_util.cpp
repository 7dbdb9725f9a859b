// store/sqlite_util.cpp: return-code checking, prepared statements and
// immediate transactions over the SQLite C API (see sqlite_util.h).
#include "store/sqlite_util.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>

namespace xrun::store::detail {

[[noreturn]] void fail(sqlite3* db, const std::string& file, std::string_view sql) {
  std::string msg = file + ": ";
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

Transaction::Transaction(sqlite3* db, const std::string& file) : db_(db), file_(file) {
  exec(db_, file_, "BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  exec(db_, file_, "COMMIT");
  open_ = false;
}

}  // namespace xrun::store::detail
