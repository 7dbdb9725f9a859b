// store/table_rows.h: reading a store's tables and views generically, cell by
// cell as SQLite holds them, one row at a time. For exports that keep every
// column a later schema version adds and never hold a whole table in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "store/store.h"

namespace xrun::store {

// One stored value: NULL, integer, real or text (a blob reads as its bytes).
using Cell = std::variant<std::monostate, int64_t, double, std::string>;

// The columns of a table or view, in schema order. Throws StoreError when the
// store has no such table or view.
std::vector<std::string> table_columns(const Store& store, const std::string& table);

// Calls `row` with the cells of `columns`, in that order, for each row of
// `table` whose `key_column` equals `key`; rows in stored order (insertion
// order, or the primary key of a WITHOUT ROWID table). Every name must be one
// table_columns lists (else StoreError).
void for_each_row(const Store& store, const std::string& table,
                  const std::vector<std::string>& columns, const std::string& key_column,
                  int64_t key, const std::function<void(const std::vector<Cell>&)>& row);

}  // namespace xrun::store
