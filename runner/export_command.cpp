// runner/export_command.cpp: `xrun export` (not yet written: issue #6).
#include <iostream>

#include "runner/commands.h"

namespace xrun::cli {

int export_command(const ExportArgs&) {
  std::cerr << "xrun: `xrun export` is not written yet (issue #6)\n";
  return kUsage;
}

}  // namespace xrun::cli
