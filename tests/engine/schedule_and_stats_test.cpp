// tests/engine/schedule_and_stats_test.cpp: the learning-rate schedules
// (warmup, constant, cosine, step) and the step statistics behind every
// stored figure (throughput over measured steps only, quantiles, outliers).
#include "catch2_compat.h"
#include <cmath>
#include <stdexcept>

#include "engine/schedule.h"
#include "core/stats.h"
#include "engine/step_stats.h"

using namespace xrun;

TEST_CASE("schedule: linear warmup then constant, cosine or step", "[schedule]") {
  ScheduleConfig s;
  s.warmup_steps = 4;
  SECTION("constant") {
    s.name = "constant";
    CHECK(learning_rate(s, 0.1, 0, 100) == Approx(0.025));
    CHECK(learning_rate(s, 0.1, 3, 100) == Approx(0.1));
    CHECK(learning_rate(s, 0.1, 50, 100) == Approx(0.1));
  }
  SECTION("cosine: from lr after warmup to min_lr at the last step") {
    s.name = "cosine";
    s.min_lr = 0.001;
    CHECK(learning_rate(s, 0.1, 1, 104) == Approx(0.05));
    CHECK(learning_rate(s, 0.1, 4, 104) == Approx(0.1));
    CHECK(learning_rate(s, 0.1, 103, 104) == Approx(0.001));
    // 49 of the 99 cosine steps done: min_lr + (lr - min_lr) (1 + cos(pi 49/99)) / 2.
    CHECK(learning_rate(s, 0.1, 53, 104) ==
          Approx(0.001 + 0.099 * 0.5 * (1 + std::cos(M_PI * 49.0 / 99.0))));
    for (int64_t t = 5; t < 104; ++t)
      CHECK(learning_rate(s, 0.1, t, 104) <= learning_rate(s, 0.1, t - 1, 104));
  }
  SECTION("step: x gamma every step_size steps after warmup") {
    s.name = "step";
    s.step_size = 10;
    s.gamma = 0.5;
    CHECK(learning_rate(s, 0.1, 4, 100) == Approx(0.1));
    CHECK(learning_rate(s, 0.1, 13, 100) == Approx(0.1));
    CHECK(learning_rate(s, 0.1, 14, 100) == Approx(0.05));
    CHECK(learning_rate(s, 0.1, 34, 100) == Approx(0.0125));
  }
  SECTION("an unknown schedule is refused") {
    s.name = "linear";
    CHECK_THROWS_WITH(learning_rate(s, 0.1, 5, 100), Catch::Contains("linear"));
  }
}

TEST_CASE("schedule: the learning rate scaled to the batch, linearly or by its square root",
          "[schedule]") {
  OptimizerConfig o;
  o.lr = 0.1;
  o.reference_batch = 256;
  CHECK(scaled_lr(o, 1024) == 0.1);  // none: as given
  o.lr_scaling = "linear";            // Goyal et al.: 0.1 x 1024/256
  CHECK(scaled_lr(o, 1024) == Approx(0.4));
  CHECK(scaled_lr(o, 64) == Approx(0.025));
  CHECK(scaled_lr(o, 256) == 0.1);
  o.lr_scaling = "sqrt";
  CHECK(scaled_lr(o, 1024) == Approx(0.2));
  CHECK(scaled_lr(o, 64) == Approx(0.05));
  o.lr_scaling = "cubic";
  CHECK_THROWS_AS(scaled_lr(o, 64), std::invalid_argument);
  // The schedule warms up to the scaled rate.
  ScheduleConfig warm;
  warm.warmup_steps = 4;
  o.lr_scaling = "linear";
  CHECK(learning_rate(warm, scaled_lr(o, 512), 1, 100) == Approx(0.2 * 2 / 4));
  CHECK(learning_rate(warm, scaled_lr(o, 512), 10, 100) == Approx(0.2));
}

TEST_CASE("step statistics: measured steps only, images over wall time", "[stats]") {
  std::vector<StepRecord> steps;
  for (int i = 0; i < 12; ++i) {
    StepRecord r;
    r.step = i;
    r.kind = i < 2 ? StepKind::warmup : (i < 11 ? StepKind::measured : StepKind::unmeasured);
    r.step_ms = i < 2 ? 1000.0 : 100.0 + i;  // warmup slow, never counted
    r.data_wait_ms = 10.0;
    r.images = 32;
    steps.push_back(r);
  }
  steps[6].skipped = true;
  RunSummary s;
  summarize_steps(steps, s);
  CHECK(s.measured_steps == 9);
  CHECK(s.measured_images == 9 * 32);
  double total = 0;
  for (int i = 2; i < 11; ++i) total += 100.0 + i;
  CHECK(s.measured_seconds == Approx(total / 1000));
  CHECK(s.throughput == Approx(9 * 32 / (total / 1000)));  // not a mean of rates
  CHECK(s.step_ms_median == Approx(106));
  CHECK(s.step_ms_p10 == Approx(102.8));
  CHECK(s.step_ms_p90 == Approx(109.2));
  CHECK(s.data_wait_fraction == Approx(90.0 / total));
  CHECK(s.skipped_steps == 1);
  CHECK(s.step_outliers == 0);
}

TEST_CASE("step statistics: quantiles interpolate, outliers by MAD", "[stats]") {
  CHECK(quantile({}, 0.5) == 0);
  CHECK(quantile({3, 1, 2}, 0.5) == 2);
  CHECK(quantile({1, 2, 3, 4}, 0.5) == Approx(2.5));
  CHECK(quantile({1, 2, 3, 4}, 0.0) == 1);
  CHECK(quantile({1, 2, 3, 4}, 1.0) == 4);
  std::vector<double> t = {100, 101, 99, 100, 102, 98, 100, 250};
  CHECK(count_outliers(t) == 1);  // 250 is far beyond 5 scaled MADs
  CHECK(count_outliers({100, 100, 100}) == 0);  // MAD 0: nothing to flag
}
