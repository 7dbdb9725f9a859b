// runner/query_commands.cpp: `xrun runs` (a table, CSV or JSON of runs with
// their headline figures, filtered by --where) and `xrun show` (everything
// stored about one run).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/phase.h"
#include "runner/commands.h"
#include "runner/output.h"
#include "runner/roofline.h"
#include "store/store.h"

namespace xrun::cli {

using nlohmann::json;

namespace {
// A demangled kernel name without its return type, template arguments and
// parameters ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, ...>(...)" ->
// "cudnn::bn_fw_tr_1C11_kernel_NCHW"); layer names pass unchanged.
std::string short_kernel_name(const std::string& name) {
  std::string n = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
  const size_t cut = n.find_first_of("<(");
  return cut == std::string::npos || cut == 0 ? n : n.substr(0, cut);
}
}  // namespace

int runs_command(const RunsArgs& args) {
  Filters filters;
  if (!parse_where(args.where, filters)) return kUsage;
  try {
    std::unique_ptr<store::Store> db;
    if (!open_existing(args.db, db)) return kRunFailed;
    if (!check_where_keys(*db, filters)) return kUsage;
    const auto runs = db->list_runs(filters);
    if (args.format == "json") {
      json out = json::array();
      for (const auto& r : runs) out.push_back(run_json(r));
      std::cout << json_text(out, 2) << "\n";
    } else if (args.format == "csv") {
      const char* cols[] = {"id", "uuid", "experiment", "sweep_index", "status", "label",
                            "device", "device_name", "batch_size", "precision",
                            "cudnn_benchmark", "workers", "throughput", "step_ms_median",
                            "step_ms_p10", "step_ms_p90", "peak_memory_bytes", "test_accuracy",
                            "achieved_flops", "fraction_of_peak", "started_at", "ranks",
                            "global_batch", "throughput_unit"};
      for (size_t i = 0; i < std::size(cols); ++i) std::cout << (i ? "," : "") << cols[i];
      std::cout << "\n";
      for (const auto& r : runs) {
        const json j = run_json(r);
        for (size_t i = 0; i < std::size(cols); ++i) {
          const json& v = j.at(cols[i]);
          std::cout << (i ? "," : "")
                    << csv_field(v.is_string() ? v.get<std::string>() : v.is_null() ? "" : json_text(v));
        }
        std::cout << "\n";
      }
    } else {
      std::vector<const store::RunInfo*> infos;
      for (const auto& r : runs) infos.push_back(&r);
      std::printf("%4s  %-8s  %-16s %4s  %-11s %-14s %-7s %6s %-9s %9s %9s %9s %6s %7s\n", "id",
                  "uuid", "experiment", "#", "status", "label", "device", "batch", "precision",
                  store::throughput_label(infos).c_str(), "step ms", "FLOP/s", "% peak", "acc %");
      // Text of any script is cut and padded by terminal columns, not bytes;
      // stored text (another program's, a merged store's) with its control
      // characters escaped.
      const auto t = [](const std::string& s) { return terminal_text(s); };
      for (const auto& r : runs) {
        std::string batch = std::to_string(r.batch_size);  // "32x2": 32 on each of 2 ranks
        if (r.ranks > 1) batch.append("x").append(std::to_string(r.ranks));
        std::printf("%4lld  %-8s  %s %4d  %-11s %s %-7s %6s %-9s %9s %9s %9s %6s %7s\n",
                    static_cast<long long>(r.id), t(r.uuid.substr(0, 8)).c_str(),
                    fit(t(r.experiment), 16).c_str(), r.sweep_index, t(r.status).c_str(),
                    fit(t(r.label), 14).c_str(), t(r.device).c_str(), batch.c_str(),
                    t(r.precision).c_str(), r.throughput > 0 ? fixed(r.throughput, 1).c_str() : "-",
                    r.step_ms_median > 0 ? fixed(r.step_ms_median, 1).c_str() : "-",
                    flops_text(r.achieved_flops, "").c_str(),
                    fixed(100.0 * r.fraction_of_peak, 1).c_str(),
                    fixed(100.0 * r.test_accuracy, 2).c_str());
      }
      std::printf("%zu run(s)\n", runs.size());
    }
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

// The "target" line of `xrun show`: when and where the run first reached
// measure.target_accuracy, or the best it reached; "" without a target.
// " (linear scaling of 0.001 at batch 256)", "" without scaling.
static std::string lr_rule(const std::map<std::string, std::string>& params) {
  const auto get = [&](const char* key) {
    const auto it = params.find(key);  // JSON text: "\"linear\"", "256"
    if (it == params.end()) return std::string();
    const json v = json::parse(it->second, nullptr, false);
    return v.is_string() ? v.get<std::string>() : it->second;
  };
  const std::string rule = get("train.optimizer.lr_scaling");
  if (rule.empty() || rule == "none") return "";
  return " (" + rule + " scaling of " + get("train.optimizer.lr") + " at batch " +
         get("train.optimizer.reference_batch") + ")";
}

// The layers furthest below their roof (profile.layers runs with peaks).
static std::string roofline_text(const store::RunDetail& d) {
  const analysis::Roofline r = analysis::make_roofline(d.kernels, d.layer_costs, d.summary);
  if (r.points.empty()) return "";
  std::ostringstream o;
  if (!std::isfinite(r.ridge)) {
    o << "\nroofline: " << r.points.size()
      << " layer passes timed, but no peak for this run's device (CPU: `xrun doctor --peak`)\n";
    return o.str();
  }
  o << "\nroofline (per micro-batch; roofs " << flops_text(r.peak_flops, "FLOP/s") << " and "
    << fixed(r.peak_bytes_per_s / 1e9, 1) << " GB/s, ridge " << fixed(r.ridge, 1)
    << " FLOP/byte): the passes furthest below their roof\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-24s %-9s %9s %9s %12s %10s %9s  %s\n", "layer", "pass", "ms",
                "at roof", "FLOP/s", "FLOP/byte", "of roof", "bound by");
  o << line;
  for (const analysis::RooflinePoint& p : analysis::furthest_below_roof(r, 8)) {
    std::snprintf(line, sizeof line, "  %-24s %-9s %9.3f %9.3f %12s %10.1f %8.0f%%  %s\n",
                  p.layer.substr(0, 24).c_str(), p.phase.c_str(), p.ms, p.ms_at_roof,
                  flops_text(p.achieved, "").c_str(), p.intensity, 100.0 * p.achieved / p.roof,
                  p.memory_bound ? "memory" : "compute");
    o << line;
  }
  o << "  memory-bound passes: " << fixed(r.memory_bound_ms, 2) << " of " << fixed(r.ms, 2)
    << " ms per micro-batch\n";
  return o.str();
}

// Each rank of a run trained by several, over the measured steps.
static std::string ranks_text(const std::vector<RankRecord>& ranks) {
  if (ranks.empty()) return "";
  std::ostringstream o;
  o << "\nranks (over the measured steps; all-reduce: the time per step the backward pass did "
       "not hide)\n";
  char line[400];
  std::snprintf(line, sizeof line, "  %4s  %-16s %-26s %9s %9s %11s %10s %10s\n", "rank", "host",
                "device", "step ms", "data ms", "allreduce", "reduced", "bus GB/s");
  o << line;
  for (const RankRecord& r : ranks) {
    std::snprintf(line, sizeof line, "  %4d  %-16s %-26s %9.2f %9.2f %8.2f ms %6.1f MiB %10s\n",
                  r.rank, terminal_text(r.host).c_str(), terminal_text(r.device).c_str(),
                  r.step_ms_median, r.data_wait_ms, r.allreduce_ms, r.bytes_reduced / 1048576.0,
                  std::isfinite(r.bus_bytes_per_s) ? fixed(r.bus_bytes_per_s / 1e9, 2).c_str()
                                                   : "-");
    o << line;
  }
  return o.str();
}

// `unit`: what the run counts, "images" or "tokens" (a GPT-2 run's).
static std::string target_text(const RunSummary& s, size_t evaluations, const std::string& unit) {
  if (!std::isfinite(s.target_accuracy)) return "";
  const std::string target = fixed(100.0 * s.target_accuracy, 2) + "%";
  if (!std::isfinite(s.time_to_target_s))
    return "  target       " + target + " not reached: best " +
           (std::isfinite(s.best_accuracy) ? fixed(100.0 * s.best_accuracy, 2) + "%"
                                           : std::string("-")) +
           " in " + std::to_string(evaluations) + " evaluation(s)\n";
  return "  target       " + target + " reached after " + fixed(s.time_to_target_s, 1) +
         " s (of which evaluation " + fixed(s.time_to_target_eval_s, 1) + " s), step " +
         std::to_string(s.steps_to_target) + ", epoch " + fixed(s.epochs_to_target, 2) + ", " +
         std::to_string(s.images_to_target) + " " + unit + "\n";
}

int show_command(const ShowArgs& args) {
  try {
    std::unique_ptr<store::Store> db;
    std::optional<store::RunDetail> detail;
    if (const int rc = open_run(args.db, args.run, "show", db, detail); rc != kOk) return rc;
    const store::RunDetail& d = *detail;
    const store::RunInfo& r = d.info;
    if (args.json) {
      json j = run_json(r);
      j["description"] = d.description;
      j["experiment_file"] = d.experiment_file;
      j["config"] = json::parse(d.config_json, nullptr, false);
      j["environment"] = d.environment.fields;
      j["host"] = d.host;
      j["pid"] = d.pid;
      j["step_count"] = d.step_count;
      json epochs = json::array();
      for (const auto& e : d.epochs)
        epochs.push_back({{"epoch", e.epoch}, {"train_loss", number_or_null(e.train_loss)},
                          {"test_loss", number_or_null(e.test_loss)},
                          {"test_accuracy", number_or_null(e.test_accuracy)},
                          {"seconds", e.seconds}, {"eval_seconds", e.eval_seconds}});
      j["epochs"] = epochs;
      json phases = json::array();
      for (const auto& p : d.phases)
        phases.push_back({{"phase", p.phase}, {"calls", p.calls}, {"host_ms", p.host_ms},
                          {"gpu_ms", p.gpu_ms}});
      j["phases"] = phases;
      json copies = json::array();
      for (const auto& m : d.memcpy)
        copies.push_back({{"direction", m.direction}, {"memory", m.memory}, {"count", m.count},
                          {"bytes", m.bytes}, {"total_ms", m.total_ms}});
      j["copies"] = copies;
      j["cupti_steps"] = d.summary.cupti_steps;
      j["cupti_overhead"] = number_or_null(d.summary.cupti_overhead);
      j["flops_per_step"] = number_or_null(d.summary.flops_per_step);
      j["achieved_flops"] = number_or_null(achieved_flops(d.summary));
      j["peak_flops"] = number_or_null(d.summary.peak_flops);
      j["peak_source"] = d.summary.peak_source;
      j["lr"] = number_or_null(d.summary.lr);
      j["peak_bytes_per_s"] = number_or_null(d.summary.peak_bytes_per_s);
      j["peak_bandwidth_source"] = d.summary.peak_bandwidth_source;
      const RunSummary& s = d.summary;
      // A GPT-2 run counts tokens: its counts are named so.
      const char* unit = d.environment.get("throughput_unit") == "tokens/s" ? "tokens" : "images";
      j["target"] = {{"accuracy", number_or_null(s.target_accuracy)},
                     {"reached", std::isfinite(s.time_to_target_s)},
                     {"seconds", number_or_null(s.time_to_target_s)},
                     {"eval_seconds", number_or_null(s.time_to_target_eval_s)},
                     {"steps", s.steps_to_target},
                     {"epochs", number_or_null(s.epochs_to_target)},
                     {unit, s.images_to_target},
                     {"best_accuracy", number_or_null(s.best_accuracy)}};
      json evals = json::array();
      for (const EvalRecord& e : d.evals)
        evals.push_back({{"step", e.step}, {"epoch", e.epoch}, {unit, e.images},
                         {"wall_seconds", e.wall_seconds}, {"eval_seconds", e.eval_seconds},
                         {"test_loss", number_or_null(e.test_loss)},
                         {"test_accuracy", number_or_null(e.test_accuracy)}});
      j["evals"] = evals;
      const analysis::Roofline roof = analysis::make_roofline(d.kernels, d.layer_costs, d.summary);
      json points = json::array();
      for (const analysis::RooflinePoint& p : roof.points)
        points.push_back({{"layer", p.layer}, {"phase", p.phase}, {"calls", p.calls},
                          {"ms", p.ms}, {"flops", p.flops}, {"bytes", p.bytes},
                          {"achieved_flops", p.achieved}, {"intensity", p.intensity},
                          {"roof_flops", number_or_null(p.roof)},
                          {"ms_at_roof", number_or_null(p.ms_at_roof)},
                          {"memory_bound", p.memory_bound}});
      j["roofline"] = {{"peak_flops", number_or_null(roof.peak_flops)},
                       {"peak_bytes_per_s", number_or_null(roof.peak_bytes_per_s)},
                       {"ridge", number_or_null(roof.ridge)},
                       {"points", points}};
      j["ranks"] = d.summary.ranks;
      j["global_batch"] = d.summary.global_batch;
      json ranks = json::array();
      for (const RankRecord& rr : d.ranks)
        ranks.push_back({{"rank", rr.rank}, {"host", rr.host}, {"device", rr.device},
                         {"step_ms_median", rr.step_ms_median}, {"data_wait_ms", rr.data_wait_ms},
                         {"allreduce_ms", rr.allreduce_ms}, {"bytes_reduced", rr.bytes_reduced},
                         {"bus_bytes_per_s", number_or_null(rr.bus_bytes_per_s)}});
      j["rank_stats"] = ranks;
      json findings = json::array();
      for (const auto& f : d.findings)
        findings.push_back({{"check", f.check}, {"message", f.message}, {"value", f.value}});
      j["findings"] = findings;
      std::cout << json_text(j, 2) << "\n";
      return kOk;
    }
    // Stored text is printed with its control characters escaped: one
    // field's line breaks as \n, then the whole (terminal_text below).
    const auto t = [](const std::string& s) { return terminal_text(s); };
    std::ostringstream o;
    o << "run " << r.id << "  " << r.uuid << "\n"
      << "  experiment   " << t(r.experiment) << " #" << r.sweep_index << " ("
      << t(d.experiment_file)
      << ")\n"
      << "  status       " << r.status << (r.error.empty() ? "" : ": " + t(r.error)) << "\n"
      << "  started      " << r.started_at << "   finished " << r.finished_at << "\n"
      << "  label        " << t(r.label) << "   host " << t(d.host) << " (pid " << d.pid << ")\n"
      << "  device       " << r.device << " (" << r.device_name << ")\n"
      << "  hashes       config " << r.config_hash << "   experiment " << r.experiment_hash
      << "\n\nsummary\n";
    if (!d.has_summary) {
      o << "  -            no figures: the run ended (" << r.status
        << ") before storing any; steps stored " << d.step_count << "\n";
    } else {
      // A GPT-2 run counts tokens (its environment says so).
      const bool tokens = d.environment.get("throughput_unit") == "tokens/s";
      o << "  throughput   " << fixed(d.summary.throughput, 1) << (tokens ? " tok/s" : " img/s")
        << " over " << d.summary.measured_steps << " measured steps ("
        << d.summary.measured_images << (tokens ? " tokens, " : " images, ")
        << fixed(d.summary.measured_seconds, 2) << " s)\n"
        << "  step time    median " << fixed(d.summary.step_ms_median, 2) << " ms, p10 "
        << fixed(d.summary.step_ms_p10, 2) << ", p90 " << fixed(d.summary.step_ms_p90, 2)
        << ", mean " << fixed(d.summary.step_ms_mean, 2) << " +- "
        << fixed(d.summary.step_ms_stddev, 2) << "\n";
      if (d.summary.ranks > 1)
        o << "  ranks        " << d.summary.ranks << " processes, global batch "
          << d.summary.global_batch << (tokens ? " tokens" : " images") << " per step (batch " << d.summary.batch_size
          << " per rank and micro-batch)\n";
      if (d.summary.step_outliers > 0)
        o << "  warning      " << d.summary.step_outliers
          << " step time outlier(s) (beyond 5 MADs of the median): another process, throttling?\n";
      if (std::isfinite(d.summary.flops_per_step))
        o << "  compute      " << flops_text(d.summary.flops_per_step, "FLOP")
          << (tokens ? " per step (6 x parameters + attention, per token), "
                     : " per step (counted from the model's layers), ")
          << flops_text(achieved_flops(d.summary), "FLOP/s") << " achieved\n";
      if (std::isfinite(d.summary.peak_flops) && std::isfinite(d.summary.flops_per_step))
        o << "  of peak      " << fixed(100.0 * achieved_flops(d.summary) / d.summary.peak_flops, 1)
          << "% of " << flops_text(d.summary.peak_flops, "FLOP/s") << " ("
          << t(d.summary.peak_source) << ")\n";
      else if (std::isfinite(d.summary.flops_per_step) && r.device == "cpu")
        o << "  of peak      - (the store held no peak of this CPU at "
          << t(d.environment.get("cpu_threads")) << " threads when the run was stored: `xrun doctor "
          << "--peak --threads " << t(d.environment.get("cpu_threads")) << " --db " << t(args.db)
          << "` measures it, about a second, for the runs stored after)\n";
      if (std::isfinite(d.summary.peak_bytes_per_s))
        o << "  memory roof  " << fixed(d.summary.peak_bytes_per_s / 1e9, 1) << " GB/s ("
          << t(d.summary.peak_bandwidth_source) << ")\n";
      o << "  data wait    " << fixed(100.0 * d.summary.data_wait_fraction, 1)
        << "% of measured step time\n"
        << "  memory       peak " << mib(d.summary.peak_memory_bytes) << "\n"
        << "  final loss   " << fixed(d.summary.final_loss, 4) << "   test accuracy "
        << (std::isfinite(d.summary.test_accuracy)
                ? fixed(100.0 * d.summary.test_accuracy, 2) + "%"
                : std::string("-"))
        << "   steps stored " << d.step_count << "\n";
      if (tokens && std::isfinite(d.summary.test_loss))  // a language model's figures
        o << "  validation   loss " << fixed(d.summary.test_loss, 4) << ", perplexity "
          << fixed(std::exp(d.summary.test_loss), 2) << ", next-token accuracy above\n";
      if (std::isfinite(d.summary.lr)) o << "  peak lr      " << d.summary.lr << lr_rule(d.params) << "\n";
      o << target_text(d.summary, d.evals.size(), tokens ? "tokens" : "images");
    }
    o << ranks_text(d.ranks);
    if (!d.findings.empty()) {
      o << "\nfindings\n";
      for (const auto& f : d.findings) o << "  [" << t(f.check) << "] " << t(f.message) << "\n";
    }
    if (!d.epochs.empty()) {
      o << "\nepochs\n  epoch  train loss  test loss  test acc %   seconds\n";
      for (const auto& e : d.epochs) {
        char line[160];
        std::snprintf(line, sizeof line, "  %5d  %10s  %9s  %10s  %8s\n", e.epoch + 1,
                      fixed(e.train_loss, 4).c_str(), fixed(e.test_loss, 4).c_str(),
                      fixed(100.0 * e.test_accuracy, 2).c_str(), fixed(e.seconds, 1).c_str());
        o << line;
      }
    }
    if (!d.memory.empty()) {
      int64_t total = 0;
      for (const auto& m : d.memory) total += m.bytes;
      o << "\nmemory plan (" << mib(total) << ")\n";
      for (const auto& m : d.memory) {
        char line[160];
        std::snprintf(line, sizeof line, "  %-24s %12s\n", m.region.c_str(), mib(m.bytes).c_str());
        o << line;
      }
    }
    if (!d.conv_algorithms.empty()) {
      std::map<std::string, int> by_source, by_algo;
      for (const auto& a : d.conv_algorithms) {
        ++by_source[a.source];
        ++by_algo[a.pass + " " + a.algo_name];
      }
      o << "\nconvolution algorithms (" << d.conv_algorithms.size() << " choices";
      for (const auto& [source, n] : by_source) o << ", " << n << " " << source;
      o << "; " << fixed(d.summary.algo_search_ms, 1) << " ms choosing, outside every figure)\n";
      for (const auto& [algo, n] : by_algo) o << "  " << n << " x " << algo << "\n";
    }
    if (!d.phases.empty()) {
      // Percentages are of the measured steps' time; eval and checkpoint
      // happen between epochs, over the whole run, and are listed apart.
      double total = 0;
      bool gpu = false, outside = false;
      for (const auto& p : d.phases) {
        if (is_step_phase_name(p.phase)) total += p.host_ms;
        else outside = true;
        gpu = gpu || p.gpu_ms > 0;
      }
      auto phase_line = [&](const PhaseRecord& p, bool share) {
        char line[200];
        std::snprintf(line, sizeof line, "  %-11s %8lld calls %11.1f ms", p.phase.c_str(),
                      static_cast<long long>(p.calls), p.host_ms);
        o << line;
        if (share) {
          std::snprintf(line, sizeof line, " %6.1f%%", total > 0 ? 100.0 * p.host_ms / total : 0.0);
          o << line;
        }
        if (gpu && d.summary.cupti_steps > 0)
          o << "   GPU " << fixed(p.gpu_ms / static_cast<double>(d.summary.cupti_steps), 3)
            << " ms/step";
        o << "\n";
      };
      o << "\nphases (host time over the measured steps, % of their sum"
        << (gpu ? "; GPU time per traced step" : "") << ")\n";
      for (const auto& p : d.phases)
        if (is_step_phase_name(p.phase)) phase_line(p, true);
      if (outside) {
        o << "outside the steps (host time over the whole run)\n";
        for (const auto& p : d.phases)
          if (!is_step_phase_name(p.phase)) phase_line(p, false);
      }
    }
    if (d.summary.cupti_steps > 0) {
      o << "\nCUPTI: kernels and copies over " << d.summary.cupti_steps
        << " traced measured steps; tracing overhead "
        << (std::isfinite(d.summary.cupti_overhead)
                ? fixed(100.0 * d.summary.cupti_overhead, 1) + "% of step time"
                : std::string("not measured (too few untraced steps)"))
        << "\n";
      for (const auto& m : d.memcpy) {
        char line[200];
        std::snprintf(line, sizeof line, "  %-7s %-9s %8lld copies %12s %10.3f ms\n",
                      m.direction.c_str(), m.memory.c_str(), static_cast<long long>(m.count),
                      mib(m.bytes).c_str(), m.total_ms);
        o << line;
      }
    }
    if (!d.kernels.empty()) {
      double total = 0;
      for (const auto& k : d.kernels) total += k.total_ms;
      std::vector<KernelRecord> top = d.kernels;
      std::stable_sort(top.begin(), top.end(), [](const KernelRecord& a, const KernelRecord& b) {
        return a.total_ms > b.total_ms;
      });
      o << "\ntop layers and kernels (layers: time over the measured steps; GPU kernels: "
           "over the CUPTI-traced steps)\n";
      for (size_t i = 0; i < top.size() && i < 15; ++i) {
        const auto& k = top[i];
        char line[256];
        std::snprintf(line, sizeof line, "  %-40s %-9s %6lld calls %10.1f ms %6.1f%%\n",
                      short_kernel_name(k.name).substr(0, 40).c_str(), k.phase.c_str(),
                      static_cast<long long>(k.calls), k.total_ms,
                      total > 0 ? 100.0 * k.total_ms / total : 0.0);
        o << line;
      }
    }
    o << roofline_text(d);
    o << "\nenvironment\n";
    for (const auto& [k, v] : d.environment.fields) o << "  " << t(k) << " = " << t(v) << "\n";
    o << "\nconfig (resolved)\n";
    for (const auto& [k, v] : d.params) o << "  " << t(k) << " = " << t(v) << "\n";
    std::cout << terminal_text(o.str(), /*keep_newlines=*/true);
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
