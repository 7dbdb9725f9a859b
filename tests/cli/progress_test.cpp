// tests/cli/progress_test.cpp: what `xrun run` prints while it trains, from
// the progress observer (runner/progress.h) driven by the real step loop
// over a fake step source: the line that says what is trained, a progress
// line every train.log_every steps and at the last (step, warmup, the last
// loss read, a positive rate), epoch lines with the evaluation, and the
// engine's notices.
#include "catch2_compat.h"

#include <cstdio>
#include <string>
#include <vector>

#include "fake_steps.h"
#include "runner/progress.h"

using namespace xrun;
using Catch::Contains;

namespace {

std::vector<std::string> lines_of(std::FILE* f) {
  std::rewind(f);
  std::vector<std::string> out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("progress: what is trained, steps at log_every, epochs and notices", "[progress]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  {
    cli::ProgressDisplay display(out, 0.0);  // not a terminal: plain lines, none held back
    RunConfig cfg;
    cfg.model.arch = "resnet18";
    cfg.train.log_every = 2;
    cli::ProgressLine progress(display, cfg);
    display.begin_run(1, 1, 0, "abc123", "");
    Environment env;
    env.fields["device_name"] = "Test CPU";
    RunShape shape;
    shape.total_steps = 6;
    shape.epochs = 2;
    shape.batch_size = 4;
    shape.parameters = 1000;
    progress.on_run_begin(env, shape);
    progress.on_message("loaded weights from w.safetensors");
    xrun_test::FakeSteps src;
    src.losses = {4, 2, 3, 1, 5, 7};
    LoopPlan plan = xrun_test::loop_plan(6, 3, 1);
    plan.log_every = 2;
    run_steps(src, plan, progress, {});
  }
  const std::vector<std::string> lines = lines_of(out);
  std::fclose(out);
  REQUIRE(lines.size() == 8);
  CHECK(lines[0] == "run 1/1: #0 [abc123]");
  CHECK_THAT(lines[1], Contains("resnet18 (1000 parameters), batch 4, 6 steps in 2 epoch(s) on "
                                "cpu (Test CPU)"));
  CHECK_THAT(lines[2], Contains("loaded weights from w.safetensors"));
  // Steps 2, 4 and 6 (log_every 2, the last); the loss is the last one read.
  CHECK_THAT(lines[3], Contains("epoch 1/2 step 2/6 loss 3.0000"));
  CHECK_THAT(lines[4], Contains("epoch 1/2: train loss 3.0000, test loss 0.5000, test accuracy "
                                "75.00%"));
  CHECK_THAT(lines[5], Contains("epoch 2/2 step 4/6 loss 1.0000"));
  CHECK_THAT(lines[6], Contains("epoch 2/2 step 6/6 loss 6.0000"));
  CHECK_THAT(lines[7], Contains("epoch 2/2: train loss"));
  for (int i : {3, 5, 6}) CHECK_THAT(lines[i], Contains("img/s ETA"));
}
