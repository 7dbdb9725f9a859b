// runner/report_command.cpp: `xrun report` (not yet written: issue #6).
#include <iostream>

#include "runner/commands.h"

namespace xrun::cli {

int report_command(const ReportArgs&) {
  std::cerr << "xrun: `xrun report` is not written yet (issue #6)\n";
  return kUsage;
}

}  // namespace xrun::cli
