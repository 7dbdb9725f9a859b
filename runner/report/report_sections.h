// runner/report/report_sections.h: the sections of the report page, each an
// HTML fragment (<section id="...">) built from ReportData. Internal to
// runner/report/: report.cpp puts them together.
#pragma once

#include <string>

#include "runner/report/report_data.h"

namespace xrun::report::sections {

// Charts (report_charts.cpp).
std::string throughput(const ReportData& data);  // id "throughput"
std::string speedup(const ReportData& data);     // id "speedup"
std::string training(const ReportData& data);    // id "training": loss and accuracy
std::string convergence(const ReportData& data); // id "convergence": accuracy by time, images
std::string roofline(const ReportData& data);    // id "roofline": each run's timed layers
std::string step_times(const ReportData& data);  // id "step-times"
std::string phases(const ReportData& data);      // id "phases"
std::string kernels(const ReportData& data);     // id "kernels"

// Tables (report.cpp).
std::string runs(const ReportData& data);         // id "runs"
std::string environment(const ReportData& data);  // id "environment"

// <section class="card" id="ID"><h2>TITLE</h2><p class="lead">LEAD</p>BODY</section>
std::string card(const std::string& id, const std::string& title, const std::string& lead,
                 const std::string& body);

}  // namespace xrun::report::sections
