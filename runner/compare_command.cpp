// runner/compare_command.cpp: `xrun compare` (not yet written: issue #6).
#include <iostream>

#include "runner/commands.h"

namespace xrun::cli {

int compare_command(const CompareArgs&) {
  std::cerr << "xrun: `xrun compare` is not written yet (issue #6)\n";
  return kUsage;
}

}  // namespace xrun::cli
