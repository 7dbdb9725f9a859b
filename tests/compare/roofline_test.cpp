// tests/compare/roofline_test.cpp: layers on the roofline (runner/roofline.h)
// from hand-made layer times, costs and peaks, each figure computed here:
// the backward passes summed, achieved FLOP/s, intensity, the roof on either
// side of the ridge, the ranking below the roof, what is left out, and the
// memory-bound finding's threshold and arithmetic.
#include "catch2_compat.h"

#include <cmath>

#include "runner/roofline.h"

using namespace xrun;
using namespace xrun::analysis;
using Catch::Contains;

namespace {

// Peaks of 100 GFLOP/s and 10 GB/s: the ridge at 10 FLOP/byte.
constexpr double kPeak = 100e9, kBandwidth = 10e9;

// A compute-bound conv (100 FLOP/byte forward) and a memory-bound batch
// norm (0.1 FLOP/byte), each timed over 2 calls per pass.
std::vector<LayerCostRecord> costs() {
  return {{"conv", "forward", 1e9, 1e7},
          {"conv", "backward_data", 1e9, 1e7},
          {"conv", "backward_weights", 1e9, 2e7},
          {"bn", "forward", 1e7, 1e8},
          {"bn", "backward", 2e7, 2e8},
          {"untimed", "forward", 1e9, 1e9}};
}
std::vector<KernelRecord> times(double bn_forward_total_ms) {
  return {{"conv", "forward", 2, 40, 19, 21},           // 20 ms per call
          {"conv", "backward", 2, 100, 49, 51},         // 50 ms
          {"bn", "forward", 2, bn_forward_total_ms, 0, 0},
          {"bn", "backward", 2, 80, 39, 41},            // 40 ms
          {"not-a-layer-with-costs", "forward", 2, 500, 0, 0}};
}

const RooflinePoint& point(const Roofline& r, const std::string& layer, const std::string& phase) {
  for (const RooflinePoint& p : r.points)
    if (p.layer == layer && p.phase == phase) return p;
  FAIL("no point " << layer << " " << phase);
  return r.points.front();
}

}  // namespace

TEST_CASE("roofline: achieved FLOP/s, intensity and the roof on both sides of the ridge",
          "[roofline]") {
  const Roofline r = make_roofline(times(60), costs(), kPeak, kBandwidth);
  CHECK(r.ridge == 10);
  // Only layers with both a time and costs: conv and bn, forward then backward.
  REQUIRE(r.points.size() == 4);
  CHECK(r.points[0].layer == "conv");
  CHECK(r.points[0].phase == "forward");
  CHECK(r.points[2].phase == "backward");

  const RooflinePoint& cf = point(r, "conv", "forward");
  CHECK(cf.ms == 20);
  CHECK(cf.achieved == Approx(1e9 / 0.020));
  CHECK(cf.intensity == 100);
  CHECK(cf.roof == kPeak);  // right of the ridge: the compute roof
  CHECK(cf.ms_at_roof == Approx(10));
  CHECK_FALSE(cf.memory_bound);
  // The backward passes summed: 2 GFLOP over 30 MB.
  const RooflinePoint& cb = point(r, "conv", "backward");
  CHECK(cb.flops == 2e9);
  CHECK(cb.bytes == 3e7);
  CHECK(cb.ms == 50);
  CHECK(cb.ms_at_roof == Approx(20));

  const RooflinePoint& bf = point(r, "bn", "forward");
  CHECK(bf.ms == 30);
  CHECK(bf.intensity == Approx(0.1));
  CHECK(bf.roof == Approx(0.1 * kBandwidth));  // left of it: the bandwidth roof
  CHECK(bf.ms_at_roof == Approx(10));  // 100 MB at 10 GB/s
  CHECK(bf.memory_bound);
  CHECK(r.ms == Approx(20 + 50 + 30 + 40));
  CHECK(r.memory_bound_ms == Approx(30 + 40));

  // Ranked by the time lost against the roof: conv backward 30 ms, bn
  // forward 20, bn backward 20 (40 - 20), conv forward 10.
  const auto below = furthest_below_roof(r, 3);
  REQUIRE(below.size() == 3);
  CHECK(below[0].layer == "conv");
  CHECK(below[0].phase == "backward");
  CHECK(below[1].layer == "bn");
  CHECK(below[2].layer == "bn");
}

TEST_CASE("roofline: without peaks, points but no roof and no finding", "[roofline]") {
  const Roofline r = make_roofline(times(60), costs(), std::nan(""), kBandwidth);
  REQUIRE(r.points.size() == 4);
  CHECK(std::isnan(r.ridge));
  CHECK(std::isnan(r.points[0].roof));
  CHECK_FALSE(r.points[3].memory_bound);
  CHECK(furthest_below_roof(r, 5).empty());
  FindingRecord f;
  CHECK_FALSE(memory_bound_finding(r, f));
  CHECK(make_roofline(times(60), costs(), kPeak, 0).points[0].roof != kPeak);  // 0 = unknown
}

TEST_CASE("roofline: a run of N ranks has one device's roofs (its peaks are all ranks')",
          "[roofline][ranks]") {
  RunSummary summary;
  summary.peak_flops = 2 * kPeak;  // two ranks: attach_peak doubled the device's
  summary.peak_bytes_per_s = 2 * kBandwidth;
  summary.ranks = 2;
  const Roofline r = make_roofline(times(60), costs(), summary);
  CHECK(r.peak_flops == kPeak);
  CHECK(r.peak_bytes_per_s == kBandwidth);
  summary.ranks = 1;
  CHECK(make_roofline(times(60), costs(), summary).peak_flops == 2 * kPeak);
}

TEST_CASE("roofline: the memory-bound finding above half the layer time, with the fusion's saving",
          "[roofline]") {
  FindingRecord f;
  // bn 30 + 40 ms of 140: 50%, not more than half: no finding.
  CHECK_FALSE(memory_bound_finding(make_roofline(times(60), costs(), kPeak, kBandwidth), f));
  // bn forward 130 ms per call: 170 of 240 ms.
  const Roofline r = make_roofline(times(260), costs(), kPeak, kBandwidth);
  REQUIRE(memory_bound_finding(r, f));
  CHECK(f.check == "memory_bound");
  CHECK(f.value == Approx(170.0 / 240.0));
  // Fusing saves half of each memory-bound pass's least bytes at 10 GB/s:
  // bn forward 50 MB = 5 ms, backward 100 MB = 10 ms.
  CHECK_THAT(f.message, Contains("71% of the layer time (170.00 of 240.00 ms") &&
                            Contains("the largest bn forward (130.00 ms)") &&
                            Contains("would save about 15.00 ms per micro-batch"));
}
