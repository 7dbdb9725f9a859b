// runner/progress.h: what `xrun run` shows while it trains. On a terminal one
// live line per run (run i/N, epoch, step, img/s, loss, ETA), rewritten in
// place; otherwise plain lines at most every `interval` seconds and at each
// epoch end, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "engine/records.h"
#include "engine/trainer.h"

namespace xrun::cli {

class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::FILE* out, double interval_seconds = 10.0);
  ~ProgressDisplay();

  void begin_run(int position, int count, int index, const std::string& short_hash,
                 const std::string& swept);
  void update(const Progress& p);
  void epoch(const EpochRecord& e, int epochs);
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

}  // namespace xrun::cli
