// runner/progress.cpp: see progress.h.
#include "runner/progress.h"

#include <unistd.h>

#include <cmath>

namespace xrun::cli {

ProgressDisplay::ProgressDisplay(std::FILE* out, double interval_seconds)
    : out_(out), tty_(isatty(fileno(out)) != 0), interval_(interval_seconds) {}

ProgressDisplay::~ProgressDisplay() { clear_live_line(); }

std::string ProgressDisplay::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = std::lround(s);
  if (t < 60)
    std::snprintf(buf, sizeof buf, "%lds", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  return buf;
}

void ProgressDisplay::clear_live_line() {
  if (live_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
    live_ = false;
  }
}

void ProgressDisplay::begin_run(int position, int count, int index, const std::string& hash,
                                const std::string& swept) {
  clear_live_line();
  prefix_ = "run " + std::to_string(position) + "/" + std::to_string(count);
  std::fprintf(out_, "%s: #%d [%s]%s%s\n", prefix_.c_str(), index, hash.c_str(),
               swept.empty() ? "" : " ", swept.c_str());
  std::fflush(out_);
  last_plain_ = std::chrono::steady_clock::now();
}

void ProgressDisplay::update(const Progress& p) {
  char line[256];
  std::snprintf(line, sizeof line, "%s epoch %d/%d step %lld/%lld%s loss %.4f %.1f %s ETA %s",
                prefix_.c_str(), p.epoch + 1, p.epochs, static_cast<long long>(p.step),
                static_cast<long long>(p.total_steps), p.warmup ? " (warmup)" : "", p.loss,
                p.images_per_second, p.unit, format_duration(p.eta_seconds).c_str());
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line);
    live_ = true;
    std::fflush(out_);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_plain_).count() >= interval_ ||
      p.step == p.total_steps) {
    std::fprintf(out_, "%s\n", line);
    std::fflush(out_);
    last_plain_ = now;
  }
}

void ProgressDisplay::epoch(const EpochRecord& e, int epochs, bool tokens) {
  clear_live_line();
  if (tokens && !std::isnan(e.test_accuracy))  // a language model's validation
    std::fprintf(out_, "%s epoch %d/%d: train loss %.4f, val loss %.4f (perplexity %.2f), "
                       "next-token accuracy %.2f%% (%.1fs + eval %.1fs)\n",
                 prefix_.c_str(), e.epoch + 1, epochs, e.train_loss, e.test_loss,
                 std::exp(e.test_loss), 100.0 * e.test_accuracy, e.seconds, e.eval_seconds);
  else if (std::isnan(e.test_accuracy))
    std::fprintf(out_, "%s epoch %d/%d: train loss %.4f (%.1fs)\n", prefix_.c_str(), e.epoch + 1,
                 epochs, e.train_loss, e.seconds);
  else
    std::fprintf(out_, "%s epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%% (%.1fs + eval %.1fs)\n",
                 prefix_.c_str(), e.epoch + 1, epochs, e.train_loss, e.test_loss,
                 100.0 * e.test_accuracy, e.seconds, e.eval_seconds);
  std::fflush(out_);
}

void ProgressDisplay::message(const std::string& line) {
  clear_live_line();
  std::fprintf(out_, "%s: %s\n", prefix_.empty() ? "xrun" : prefix_.c_str(), line.c_str());
  std::fflush(out_);
}

void ProgressDisplay::end_run(const std::string& line) {
  clear_live_line();
  std::fprintf(out_, "%s: %s\n", prefix_.c_str(), line.c_str());
  std::fflush(out_);
}

void ProgressLine::on_run_begin(const Environment& env, const RunShape& shape) {
  shape_ = shape;
  last_loss_ = NAN;
  since_ = std::chrono::steady_clock::now();
  display_.message(cfg_.model.arch + " (" + std::to_string(shape.parameters) +
                   " parameters), batch " + std::to_string(shape.batch_size) + ", " +
                   std::to_string(shape.total_steps) + " steps in " +
                   std::to_string(shape.epochs) + " epoch(s) on " + cfg_.train.device.name() +
                   " (" + env.get("device_name") + ")");
}

void ProgressLine::on_step_end(const StepRecord& r) {
  if (std::isfinite(r.loss)) last_loss_ = r.loss;
  images_ += r.images;
  ++steps_;
  const int64_t done = r.step + 1;
  if (done % cfg_.train.log_every != 0 && done != shape_.total_steps) return;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - since_).count();
  Progress p;
  p.step = done;
  p.total_steps = shape_.total_steps;
  p.epoch = r.epoch;
  p.epochs = shape_.epochs;
  p.loss = last_loss_;
  p.images_per_second = secs > 0 ? static_cast<double>(images_) / secs : 0;
  p.unit = cfg_.model.is_gpt2() ? "tok/s" : "img/s";
  p.eta_seconds = steps_ > 0 ? secs / static_cast<double>(steps_) *
                                   static_cast<double>(shape_.total_steps - done)
                             : 0;
  p.warmup = r.kind == StepKind::warmup;
  display_.update(p);
  since_ = now;
  images_ = steps_ = 0;
}

void ProgressLine::on_epoch_end(const EpochRecord& e) {
  display_.epoch(e, shape_.epochs, cfg_.model.is_gpt2());
  since_ = std::chrono::steady_clock::now();  // eval time is not training throughput
  images_ = steps_ = 0;
}

}  // namespace xrun::cli
