// runner/progress.h: what `xrun run` shows while it trains. On a terminal one
// live line per run (run i/N, epoch, step, img/s, loss, ETA), rewritten in
// place; otherwise plain lines at most every `interval` seconds and at each
// epoch end, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "core/config.h"
#include "core/records.h"
#include "core/run_observer.h"

namespace xrun::cli {

struct Progress {
  int64_t step = 0;          // steps done
  int64_t total_steps = 0;
  int epoch = 0;             // 0-based
  int epochs = 0;
  double loss = 0;           // last loss read back
  double images_per_second = 0;  // over the last progress interval (GPT-2: tokens)
  const char* unit = "img/s";     // "tok/s" for a GPT-2 run
  double eta_seconds = 0;
  bool warmup = false;
};

class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::FILE* out, double interval_seconds = 10.0);
  ~ProgressDisplay();

  void begin_run(int position, int count, int index, const std::string& short_hash,
                 const std::string& swept);
  void update(const Progress& p);
  // `tokens`: a GPT-2 run (validation loss, perplexity, next-token accuracy).
  void epoch(const EpochRecord& e, int epochs, bool tokens = false);
  void message(const std::string& line);  // a line of its own (clears the live line)
  void end_run(const std::string& line);

  static std::string format_duration(double seconds);  // "45s", "3m05s", "1h02m"

 private:
  void clear_live_line();
  std::FILE* out_;
  bool tty_;
  double interval_;
  bool live_ = false;
  std::string prefix_;
  std::chrono::steady_clock::time_point last_plain_{};
};

// The run as `xrun run` shows it, as a run observer: what is trained, a
// Progress every train.log_every steps and at the last, epoch lines, and the
// engine's notices.
class ProgressLine final : public RunObserver {
 public:
  ProgressLine(ProgressDisplay& display, const RunConfig& cfg) : display_(display), cfg_(cfg) {}
  void on_run_begin(const Environment& env, const RunShape& shape) override;
  void on_step_end(const StepRecord& r) override;
  void on_epoch_end(const EpochRecord& e) override;
  void on_message(const std::string& m) override { display_.message(m); }

 private:
  ProgressDisplay& display_;
  const RunConfig& cfg_;
  RunShape shape_;
  double last_loss_ = 0;
  int64_t images_ = 0, steps_ = 0;  // since the last progress line
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
};

}  // namespace xrun::cli
