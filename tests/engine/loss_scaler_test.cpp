// tests/engine/loss_scaler_test.cpp: the dynamic loss scaler against PyTorch
// GradScaler's documented behaviour (init 65536, x0.5 and skip on inf/NaN,
// x2 after 2000 clean steps in a row; disabled = scale 1, nothing skipped
// unless gradients are not finite).
#include "catch2_compat.h"

#include "engine/loss_scaler.h"

using xrun::LossScaler;

TEST_CASE("loss scaler: GradScaler's schedule", "[scaler]") {
  LossScaler s(true);
  CHECK(s.scale() == 65536.0);
  // An overflow halves the scale and skips the step.
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 32768.0);
  CHECK(s.skipped_steps() == 1);
  // 1999 clean steps: no growth yet; the 2000th doubles.
  for (int i = 0; i < 1999; ++i) CHECK(s.update(false));
  CHECK(s.scale() == 32768.0);
  CHECK(s.growth_tracker() == 1999);
  CHECK(s.update(false));
  CHECK(s.scale() == 65536.0);
  CHECK(s.growth_tracker() == 0);
  // An overflow resets the count of clean steps.
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  CHECK(s.scale() == 32768.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  CHECK(s.scale() == 32768.0);
  s.update(false);
  CHECK(s.scale() == 65536.0);
  CHECK(s.skipped_steps() == 2);
  // Repeated overflows keep halving.
  for (int i = 0; i < 10; ++i) s.update(true);
  CHECK(s.scale() == 64.0);
}

TEST_CASE("loss scaler: disabled for fp32/tf32/bf16", "[scaler]") {
  LossScaler s(false);
  CHECK(s.scale() == 1.0);
  CHECK(s.update(false));
  CHECK_FALSE(s.update(true));  // non-finite gradients are never applied
  CHECK(s.scale() == 1.0);
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("loss scaler: restore continues exactly", "[scaler]") {
  LossScaler a(true), b(true);
  for (int i = 0; i < 1234; ++i) a.update(i % 500 == 7);
  b.restore(a.scale(), a.growth_tracker());
  for (int i = 0; i < 3000; ++i) {
    const bool inf = i % 777 == 5;
    CHECK(a.update(inf) == b.update(inf));
    CHECK(a.scale() == b.scale());
  }
}
