// runner/merge_command.cpp: `xrun merge` (not yet written: issue #6).
#include <iostream>

#include "runner/commands.h"

namespace xrun::cli {

int merge_command(const MergeArgs&) {
  std::cerr << "xrun: `xrun merge` is not written yet (issue #6)\n";
  return kUsage;
}

}  // namespace xrun::cli
