// runner/report_command.cpp: `xrun report [--db PATH] [--where KEY=VALUE]...
// [--by KEY] [--baseline VALUE] -o report.html`: gathers the matching runs
// (runner/report/report_data.h), renders one self-contained HTML page
// (runner/report/report.h) and writes it; the store is only read.
#include <iostream>

#include "runner/atomic_file.h"
#include "runner/commands.h"
#include "runner/output.h"
#include "runner/report/report.h"

namespace xrun::cli {

int report_command(const ReportArgs& args) {
  report::ReportOptions options;
  if (!parse_where(args.where, options.where)) return kUsage;
  options.by = args.by;
  options.baseline = args.baseline;
  if (const std::string why = output_overwrites_store(args.output, args.db); !why.empty()) {
    std::cerr << "xrun: report: " << why << "\n";
    return kUsage;
  }
  try {
    std::unique_ptr<store::Store> db;
    if (!open_existing(args.db, db)) return kRunFailed;
    if (!check_where_keys(*db, options.where)) return kUsage;
    const report::ReportData data = report::gather_report(*db, options);
    if (data.runs.empty()) {
      std::cerr << "xrun: no runs in " << args.db
                << (options.where.empty() ? "" : " match the --where filters")
                << "; nothing to report (`xrun runs` lists them)\n";
      return kRunFailed;
    }
    const std::string html = report::render_report(data);
    write_file_atomically(args.output, html);
    // Written to standard output (-o -), the note goes to standard error.
    (args.output == "-" ? std::cerr : std::cout)
        << "wrote " << args.output << ": " << data.runs.size() << " run(s) from " << args.db
        << ", " << (html.size() + 1023) / 1024 << " KiB\n";
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  } catch (const std::invalid_argument& e) {  // --by or --baseline: the message names it
    std::cerr << "xrun: " << e.what() << "\n";
    return kUsage;
  } catch (const std::runtime_error& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
