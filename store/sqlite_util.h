// store/sqlite_util.h: the one place that talks to the SQLite C API directly.
// check() turns a failing return code into a StoreError naming the file, the
// statement and sqlite3_errmsg; Statement wraps a prepared statement with bound
// parameters (NaN doubles bind as NULL, NULL reads back as NaN); Transaction is
// a BEGIN IMMEDIATE ... COMMIT scope that rolls back when left by an exception.
// Internal to store/: nothing outside it includes this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/store.h"

struct sqlite3_stmt;

namespace xrun::store::detail {

// Throws StoreError("FILE: MESSAGE (sqlite: ERRMSG) in: SQL") when rc is not
// SQLITE_OK, SQLITE_ROW or SQLITE_DONE.
void check(int rc, sqlite3* db, const std::string& file, std::string_view sql);
[[noreturn]] void fail(sqlite3* db, const std::string& file, std::string_view sql);

// Runs SQL without parameters or results (DDL, PRAGMA, BEGIN/COMMIT).
void exec(sqlite3* db, const std::string& file, const std::string& sql);

class Statement {
 public:
  Statement(sqlite3* db, const std::string& file, std::string sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);  // NaN binds NULL
  Statement& bind(int index, const std::string& value);
  Statement& bind(int index, const char* value) { return bind(index, std::string(value)); }
  Statement& bind(int index, const std::optional<std::string>& value);  // nullopt binds NULL
  Statement& bind_null(int index);

  bool step();  // true while a row is available; throws StoreError on failure
  void run() { step(); reset(); }  // a statement without results
  void reset();  // ready to bind and step again (bindings cleared)

  bool is_null(int column) const;
  int64_t int64(int column) const;              // NULL reads 0
  double real(int column) const;                // NULL reads NaN
  std::string text(int column) const;           // NULL reads ""

 private:
  sqlite3* db_;
  std::string file_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE (waits up to busy_timeout for the write lock); commit()
// ends it; destroying it uncommitted rolls back and never throws.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& file);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  sqlite3* db_;
  std::string file_;
  bool open_ = true;
};

}  // namespace xrun::store::detail
