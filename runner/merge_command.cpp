// runner/merge_command.cpp: `xrun merge --into OUT IN...`: brings the runs of
// result files from other machines into one store (store/merge.h does the
// work) and prints, per input, how many runs were added and how many the
// output already had, then the totals.
#include <iostream>

#include "runner/commands.h"
#include "store/merge.h"
#include "store/store.h"

namespace xrun::cli {

int merge_command(const MergeArgs& args) {
  try {
    const std::vector<store::MergeCount> counts = store::merge_stores(args.into, args.inputs);
    int64_t added = 0, present = 0;
    for (const store::MergeCount& c : counts) {
      std::cout << c.input << ": " << c.added << " run(s) added, " << c.already_present
                << " already present\n";
      added += c.added;
      present += c.already_present;
    }
    std::cout << "total: " << added << " run(s) added, " << present << " already present, from "
              << counts.size() << " file(s) into " << args.into << "\n";
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    std::cerr << "xrun: nothing was merged into " << args.into << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
