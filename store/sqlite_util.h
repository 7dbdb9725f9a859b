// store/sqlite_util.h: the one place that talks to the SQLite C API directly.
// check() turns a failing return code into a StoreError naming the file, the
// statement and sqlite3_errmsg; Statement wraps a prepared statement with bound
// parameters (NaN doubles bind as NULL, NULL reads back as NaN); Transaction is
// a BEGIN IMMEDIATE ... COMMIT scope that rolls back when left by an exception;
// a few schema look-ups (a table's columns, whether it has rowids) and the
// backup API for code that copies tables generically (merge, export).
// Internal to store/: nothing outside it includes this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

struct sqlite3_stmt;

namespace xrun::store::detail {

// Throws StoreError("FILE: MESSAGE (sqlite: ERRMSG) in: SQL") when rc is not
// SQLITE_OK, SQLITE_ROW or SQLITE_DONE.
void check(int rc, sqlite3* db, const std::string& file, std::string_view sql);
[[noreturn]] void fail(sqlite3* db, const std::string& file, std::string_view sql);

// Runs SQL without parameters or results (DDL, PRAGMA, BEGIN/COMMIT).
void exec(sqlite3* db, const std::string& file, const std::string& sql);

// The storage class of a value read from a row.
enum class ColumnType { null, integer, real, text, blob };

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
  // Binds the value in `column` of `from`'s current row as it is stored
  // (NULL, integer, real, text or blob): copies a row without knowing its types.
  Statement& bind_column(int index, const Statement& from, int column);

  bool step();  // true while a row is available; throws StoreError on failure
  void run() { step(); reset(); }  // a statement without results
  void reset();  // ready to bind and step again (bindings cleared)

  ColumnType type(int column) const;
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
// ends it; destroying it uncommitted rolls back and never throws. Inside an
// open transaction it is a savepoint instead, so writes nest: they become
// durable only when the outermost transaction commits.
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
  bool nested_ = false;
  bool open_ = true;
};

// "name" quoted as an SQL identifier (for names read from the schema).
std::string quote_identifier(const std::string& name);
// The names quoted and comma-separated: "a", "b", "c".
std::string identifier_list(const std::vector<std::string>& names);

// The columns of a table or view in schema order; empty when there is none.
std::vector<std::string> table_columns(sqlite3* db, const std::string& file,
                                       const std::string& table);

// Whether `table` is an ordinary table with rowids (not WITHOUT ROWID, not a
// view): its rows in insertion order are ORDER BY rowid.
bool has_rowid(sqlite3* db, const std::string& file, const std::string& table);

// Copies the whole database behind `source` (opened from `source_file`) into
// a new file at `dest_path` with the online backup API, page by page.
void backup_database(sqlite3* source, const std::string& source_file,
                     const std::string& dest_path);

// As backup_database, but leaves the copy open and returns its handle (the
// caller closes it); with dest_path ":memory:" a private in-memory copy.
sqlite3* backup_open(sqlite3* source, const std::string& source_file,
                     const std::string& dest_path);

}  // namespace xrun::store::detail
