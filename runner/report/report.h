// runner/report/report.h: the HTML report of `xrun report`: one
// self-contained file (inline CSS and SVG, no scripts, nothing fetched) with
// a header (store, date, runs), the runs table, throughput by batch size,
// speedup against a baseline, loss and accuracy curves, step-time
// histograms, phase breakdown, top kernels and the machines' environment.
#pragma once

#include <string>

#include "runner/report/report_data.h"

namespace xrun::report {

// The whole page.
std::string render_report(const ReportData& data);


}  // namespace xrun::report
