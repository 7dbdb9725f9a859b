// store/merge.cpp: merge_stores (see merge.h), in three stages. The paths
// are checked; each input is opened read-only, integrity-checked and, when
// older, migrated in a temporary copy made with the backup API; only then is
// the output opened, and one transaction copies the runs it lacks. Rows are
// copied value by value in the columns the output's schema lists (PRAGMA
// table_info), and every table with a `run` column is a run's child table,
// so a table or column a later schema version adds comes along unchanged.
#include "store/merge.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>

#include "store/schema.h"
#include "store/sqlite_util.h"
#include "store/store.h"

namespace xrun::store {
namespace {

namespace fs = std::filesystem;
using detail::identifier_list;
using detail::quote_identifier;
using detail::Statement;

constexpr size_t kNone = static_cast<size_t>(-1);

// An open database and the path it is known by in messages.
struct Connection {
  std::string path;
  sqlite3* db = nullptr;
  explicit Connection(std::string p) : path(std::move(p)) {}
  ~Connection() { sqlite3_close_v2(db); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
};

// A directory for migrated copies of inputs, made when first needed and
// removed with its contents at scope exit.
class ScratchDir {
 public:
  ScratchDir() = default;
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) {
    if (path_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "xrun-merge-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) == nullptr)
        throw StoreError(tmpl + ": cannot create a directory for migrated copies (" +
                         std::strerror(errno) + ")");
      path_ = tmpl;
    }
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

// --- Checking and opening the inputs ----------------------------------------------

// Throws for an input that is missing, not a regular file, or the output.
void check_paths(const std::string& into, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const bool into_exists = fs::exists(into, ec);
  for (const std::string& in : inputs) {
    const fs::file_status st = fs::status(in, ec);
    if (st.type() == fs::file_type::not_found) throw StoreError(in + ": no such file");
    if (ec) throw StoreError(in + ": " + ec.message());
    if (!fs::is_regular_file(st)) throw StoreError(in + ": not a regular file");
    if (into_exists && fs::equivalent(into, in, ec))
      throw StoreError(in + ": this is the store being merged into (--into " + into +
                       "); it cannot be an input as well");
  }
}

// Throws unless SQLite's quick_check finds every page of the file sound.
void check_integrity(sqlite3* db, const std::string& path) {
  std::string verdict;
  try {
    Statement st(db, path, "PRAGMA quick_check(1)");
    verdict = st.step() ? st.text(0) : "no answer";
  } catch (const StoreError& e) {
    throw StoreError(path + ": the SQLite file is corrupt (" + e.what() + ")");
  }
  if (verdict != "ok")
    throw StoreError(path + ": the SQLite file is corrupt (quick_check: " + verdict + ")");
}

// Opens an input for reading at the latest schema version: the file itself,
// read-only, or a migrated copy of it in `scratch`.
std::unique_ptr<Connection> open_input(const std::string& path, size_t index,
                                       ScratchDir& scratch) {
  auto input = std::make_unique<Connection>(path);
  int version = 0;
  input->db = detail::open_read_only(path, version);
  check_integrity(input->db, path);
  if (version == detail::latest_version()) return input;

  const std::string copy = scratch.file("input" + std::to_string(index) + ".db");
  detail::backup_database(input->db, path, copy);
  sqlite3_close_v2(input->db);
  input->db = nullptr;
  try {
    input->db = detail::open_database(copy, detail::latest_version());
  } catch (const StoreError& e) {
    throw StoreError(path + ": migrating a copy from schema version " + std::to_string(version) +
                     " failed: " + e.what());
  }
  return input;
}

// --- The output's schema ------------------------------------------------------------

// The tables merge copies, with their columns as the output has them.
struct Schema {
  std::vector<std::string> experiment_columns;  // all but id
  std::vector<std::string> run_columns;         // all but id
  struct Child {
    std::string table;
    std::vector<std::string> columns;  // all, `run` among them
    bool has_rowid = true;
  };
  std::vector<Child> children;  // every table with a `run` column
  std::vector<std::string> cache_columns;
  std::vector<std::string> cpu_peak_columns;
};

std::vector<std::string> columns_except(sqlite3* db, const std::string& file,
                                        const std::string& table, const std::string& skip) {
  std::vector<std::string> out;
  for (std::string& c : detail::table_columns(db, file, table))
    if (c != skip) out.push_back(std::move(c));
  return out;
}

Schema read_schema(sqlite3* db, const std::string& file) {
  Schema s;
  s.experiment_columns = columns_except(db, file, "experiments", "id");
  s.run_columns = columns_except(db, file, "runs", "id");
  s.cache_columns = detail::table_columns(db, file, "conv_algo_cache");
  s.cpu_peak_columns = detail::table_columns(db, file, "cpu_peaks");
  Statement tables(db, file,
                   "SELECT m.name FROM sqlite_master m WHERE m.type = 'table'"
                   " AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND EXISTS"
                   " (SELECT 1 FROM pragma_table_info(m.name) p WHERE p.name = 'run')"
                   " ORDER BY m.name");
  while (tables.step()) {
    Schema::Child child{tables.text(0), {}, true};
    child.columns = detail::table_columns(db, file, child.table);
    child.has_rowid = detail::has_rowid(db, file, child.table);
    s.children.push_back(std::move(child));
  }
  return s;
}

// --- SQL text -------------------------------------------------------------------------

std::string parameters(size_t count) {
  std::string out;
  for (size_t i = 1; i <= count; ++i) out += (i > 1 ? ", ?" : "?") + std::to_string(i);
  return out;
}

std::string insert_sql(const std::string& table, const std::vector<std::string>& columns) {
  return "INSERT INTO " + quote_identifier(table) + " (" + identifier_list(columns) + ") VALUES (" +
         parameters(columns.size()) + ")";
}

size_t position(const std::vector<std::string>& columns, const std::string& name,
                const std::string& table, const std::string& file) {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return i;
  throw StoreError(file + ": table " + table + " has no column " + name);
}

// Binds `read`'s current row, columns 0..count-1, to `write`'s parameters
// 1..count, except column `replaced`, which gets `value`.
void bind_row(Statement& write, const Statement& read, size_t count, size_t replaced,
              int64_t value) {
  for (size_t i = 0; i < count; ++i) {
    const int parameter = static_cast<int>(i) + 1;
    if (i == replaced)
      write.bind(parameter, value);
    else
      write.bind_column(parameter, read, static_cast<int>(i));
  }
}

// --- Copying one input ----------------------------------------------------------------

// The rows of one child table of a run, from the input to the output.
class ChildCopy {
 public:
  ChildCopy(const Connection& in, const Connection& out, const Schema::Child& child)
      : read_(in.db, in.path,
              "SELECT " + identifier_list(child.columns) + " FROM " + quote_identifier(child.table) +
                  " WHERE run = ?1" + (child.has_rowid ? " ORDER BY rowid" : "")),
        write_(out.db, out.path, insert_sql(child.table, child.columns)),
        count_(child.columns.size()),
        run_(position(child.columns, "run", child.table, out.path)) {}

  void copy(int64_t from_run, int64_t to_run) {
    read_.bind(1, from_run);
    while (read_.step()) {
      bind_row(write_, read_, count_, run_, to_run);
      write_.run();
    }
    read_.reset();
  }

 private:
  Statement read_, write_;
  size_t count_, run_;
};

// Copies the runs of one input the output lacks, with their experiments and
// child rows, and merges its convolution-algorithm cache.
class InputMerge {
 public:
  InputMerge(const Connection& in, const Connection& out, const Schema& schema)
      : in_(in), out_(out), schema_(schema) {
    for (const Schema::Child& child : schema.children) children_.emplace_back(in, out, child);
  }

  MergeCount run() {
    MergeCount count;
    count.input = in_.path;
    const std::vector<std::string>& columns = schema_.run_columns;
    const size_t uuid = position(columns, "uuid", "runs", out_.path);
    const size_t experiment = position(columns, "experiment", "runs", out_.path);
    // The input's id comes last, after the columns that are copied.
    Statement read(in_.db, in_.path,
                   "SELECT " + identifier_list(columns) + ", id FROM runs ORDER BY id");
    const int input_id = static_cast<int>(columns.size());
    Statement known(out_.db, out_.path, "SELECT 1 FROM runs WHERE uuid = ?1");
    Statement write(out_.db, out_.path, insert_sql("runs", columns));
    while (read.step()) {
      known.bind_column(1, read, static_cast<int>(uuid));
      const bool present = known.step();
      known.reset();
      if (present) {
        ++count.already_present;
        continue;
      }
      const int64_t experiment_in_output = experiment_id(read.int64(static_cast<int>(experiment)));
      bind_row(write, read, columns.size(), experiment, experiment_in_output);
      write.run();
      const int64_t new_id = sqlite3_last_insert_rowid(out_.db);
      for (ChildCopy& child : children_) child.copy(read.int64(input_id), new_id);
      ++count.added;
    }
    merge_cache();
    return count;
  }

 private:
  // The output's id of the input's experiment `id`, inserted when new.
  int64_t experiment_id(int64_t id) {
    if (auto it = experiments_.find(id); it != experiments_.end()) return it->second;
    const std::vector<std::string>& columns = schema_.experiment_columns;
    Statement read(in_.db, in_.path,
                   "SELECT " + identifier_list(columns) + " FROM experiments WHERE id = ?1");
    read.bind(1, id);
    if (!read.step())
      throw StoreError(in_.path + ": a run refers to experiment id " + std::to_string(id) +
                       ", which is not in the file");
    Statement write(out_.db, out_.path,
                    insert_sql("experiments", columns) + " ON CONFLICT (name, file) DO NOTHING");
    bind_row(write, read, columns.size(), kNone, 0);
    write.run();
    Statement find(out_.db, out_.path, "SELECT id FROM experiments WHERE name = ?1 AND file = ?2");
    for (int i : {1, 2}) {
      const size_t column = position(columns, i == 1 ? "name" : "file", "experiments", out_.path);
      find.bind_column(i, read, static_cast<int>(column));
    }
    find.step();
    return experiments_[id] = find.int64(0);
  }

  // The tables keyed by what they describe rather than by a run: cache
  // entries by (device_key, key), the newer updated_at winning; CPU peaks
  // by (cpu, isa, threads), the newer measurement winning.
  void merge_cache() {
    merge_keyed("conv_algo_cache", schema_.cache_columns, {"device_key", "key"}, "updated_at");
    merge_keyed("cpu_peaks", schema_.cpu_peak_columns, {"cpu", "isa", "threads"}, "measured_at");
  }
  void merge_keyed(const std::string& table, const std::vector<std::string>& columns,
                   const std::vector<std::string>& keys, const std::string& newer) {
    std::string updates;
    for (const std::string& c : columns)
      if (std::find(keys.begin(), keys.end(), c) == keys.end())
        updates += (updates.empty() ? "" : ", ") + quote_identifier(c) + " = excluded." +
                   quote_identifier(c);
    Statement read(in_.db, in_.path,
                   "SELECT " + identifier_list(columns) + " FROM " + quote_identifier(table));
    Statement write(out_.db, out_.path,
                    insert_sql(table, columns) + " ON CONFLICT (" + identifier_list(keys) +
                        ") DO UPDATE SET " + updates + " WHERE excluded." +
                        quote_identifier(newer) + " > " + quote_identifier(table) + "." +
                        quote_identifier(newer));
    while (read.step()) {
      bind_row(write, read, columns.size(), kNone, 0);
      write.run();
    }
  }

  const Connection& in_;
  const Connection& out_;
  const Schema& schema_;
  std::deque<ChildCopy> children_;  // deque: a ChildCopy cannot move
  std::map<int64_t, int64_t> experiments_;  // input id -> output id
};

// Opens (creating) the output and merges every input in one transaction.
std::vector<MergeCount> merge_into(const std::string& into,
                                   const std::vector<std::unique_ptr<Connection>>& inputs) {
  Connection out(into);
  out.db = detail::open_database(into, detail::latest_version());
  const Schema schema = read_schema(out.db, into);
  detail::Transaction tx(out.db, into);
  std::vector<MergeCount> counts;
  for (const auto& in : inputs) counts.push_back(InputMerge(*in, out, schema).run());
  tx.commit();
  return counts;
}

// Removes a store file the merge created, with its WAL and shared-memory files.
void remove_store(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
}

}  // namespace

std::vector<MergeCount> merge_stores(const std::string& into,
                                     const std::vector<std::string>& inputs) {
  check_paths(into, inputs);
  ScratchDir scratch;  // declared before the inputs: removed after they close
  std::vector<std::unique_ptr<Connection>> opened;
  for (size_t i = 0; i < inputs.size(); ++i) opened.push_back(open_input(inputs[i], i, scratch));
  std::error_code ec;
  const bool created = !fs::exists(into, ec);
  try {
    return merge_into(into, opened);
  } catch (...) {
    if (created) remove_store(into);
    throw;
  }
}

}  // namespace xrun::store
