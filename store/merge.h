// store/merge.h: bringing the runs of result files made on other machines
// into one store (`xrun merge`). Runs are matched by UUID, so merging a file
// twice adds nothing; experiments by (name, file); integer ids are assigned
// anew. Everything of a run comes along: the runs row and the rows of every
// table with a `run` column. Convolution-cache entries merge by
// (device_key, key), the newer updated_at winning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xrun::store {

// What merging one input did.
struct MergeCount {
  std::string input;            // the path as given
  int64_t added = 0;            // runs copied into the output
  int64_t already_present = 0;  // runs whose UUID the output already had
};

// Merges the runs of `inputs` into the store at `into`, created when absent,
// and returns one count per input, in order. Every input is checked before
// the output is touched: it must exist, be an xrun store no newer than this
// build, pass SQLite's quick_check, and not be the output itself. An input of
// an older schema version is migrated in a temporary copy; the input file is
// only read. The merge is one transaction: on any error (a StoreError naming
// the file) the output is left as it was, and an output the merge created is
// removed again.
std::vector<MergeCount> merge_stores(const std::string& into,
                                     const std::vector<std::string>& inputs);

}  // namespace xrun::store
