// store/table_rows.cpp: table_columns and for_each_row (see table_rows.h).
#include "store/table_rows.h"

#include <algorithm>

#include "store/sqlite_util.h"

namespace xrun::store {

using detail::ColumnType;
using detail::quote_identifier;
using detail::Statement;

namespace {

Cell read_cell(const Statement& st, int column) {
  switch (st.type(column)) {
    case ColumnType::null: return std::monostate{};
    case ColumnType::integer: return st.int64(column);
    case ColumnType::real: return st.real(column);
    default: return st.text(column);
  }
}

// Throws unless every name in `names` is a column of `table`.
void check_columns(const Store& store, const std::string& table,
                   const std::vector<std::string>& names) {
  const std::vector<std::string> known = table_columns(store, table);
  for (const std::string& name : names)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw StoreError(store.path() + ": " + table + " has no column " + name);
}

}  // namespace

std::vector<std::string> table_columns(const Store& store, const std::string& table) {
  std::vector<std::string> columns = detail::table_columns(store.handle(), store.path(), table);
  if (columns.empty()) throw StoreError(store.path() + ": no table or view " + table);
  return columns;
}

void for_each_row(const Store& store, const std::string& table,
                  const std::vector<std::string>& columns, const std::string& key_column,
                  int64_t key, const std::function<void(const std::vector<Cell>&)>& row) {
  std::vector<std::string> named = columns;
  named.push_back(key_column);
  check_columns(store, table, named);
  std::string sql = "SELECT " + detail::identifier_list(columns) + " FROM " +
                    quote_identifier(table) + " WHERE " + quote_identifier(key_column) + " = ?1";
  if (detail::has_rowid(store.handle(), store.path(), table)) sql += " ORDER BY rowid";
  Statement st(store.handle(), store.path(), sql);
  st.bind(1, key);
  std::vector<Cell> cells(columns.size());
  while (st.step()) {
    for (size_t i = 0; i < columns.size(); ++i) cells[i] = read_cell(st, static_cast<int>(i));
    row(cells);
  }
}

}  // namespace xrun::store
