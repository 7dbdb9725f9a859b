// tests/data/shuffle_test.cpp: the shuffle judged from outside the loader.
// The other loader tests take their expected orders from epoch_permutation
// itself, so a biased shuffle (Sattolo's cycle: j drawn below i instead of
// up to i, which never leaves an element in place) passed them all. Here:
//   - the order is pinned against a Fisher-Yates written in this file on the
//     same random stream (mt19937_64 seeded with mix_seed(seed, epoch,
//     0x5bff1e), uniform integers by rejecting the top partial block of
//     2^64, as engine/data/random.h documents), and against literal orders;
//   - the loader delivers exactly that order for any worker count;
//   - the orders are uniform: over a fixed set of seeds (deterministic), the
//     count of each value at each position, and of each whole permutation of
//     four, pass a chi-square test with a generous fixed bound.
#include "catch2_compat.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "engine/data/loader.h"
#include "engine/data/random.h"

using namespace xrun::data;

namespace {

// Uniform in [0, n) by rejection: values at or above the largest multiple
// of n that fits in 2^64 are drawn again.
uint64_t reference_below(uint64_t n, std::mt19937_64& rng) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t v = rng();
    if (v < limit) return v % n;
  }
}

// Durstenfeld's Fisher-Yates: for i from n-1 down to 1, swap i with a
// uniform j in [0, i] (i included: an element may stay where it is).
std::vector<int64_t> reference_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch), 0x5bff1e));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(reference_below(static_cast<uint64_t>(i) + 1, rng));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> engine_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  epoch_permutation(seed, epoch, order.data(), n);
  return order;
}

// A dataset whose label is the sample's index.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int channels() const override { return 1; }
  int height() const override { return 1; }
  int width() const override { return 1; }
  int num_classes() const override { return 10; }
  void get(int64_t index, uint8_t* chw, int32_t* label) const override {
    chw[0] = static_cast<uint8_t>(index);
    *label = static_cast<int32_t>(index);
  }
  std::string describe() const override { return "index"; }

 private:
  int64_t n_;
};

double chi_square(const std::vector<int64_t>& counts, double expected) {
  double x2 = 0;
  for (int64_t c : counts) x2 += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  return x2;
}

}  // namespace

TEST_CASE("shuffle: epoch_permutation is Fisher-Yates on its documented stream", "[data][shuffle]") {
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000})
    for (uint64_t seed : {0ull, 3ull, 12345ull})
      for (int64_t epoch : {0, 1, 9}) {
        INFO("n " << n << " seed " << seed << " epoch " << epoch);
        CHECK(engine_permutation(seed, epoch, n) == reference_permutation(seed, epoch, n));
      }
  // A literal order, so a change to the stream itself shows too.
  const std::vector<int64_t> seed3_epoch0 = {7, 4, 3, 1, 9, 5, 8, 2, 6, 0};
  CHECK(reference_permutation(3, 0, 10) == seed3_epoch0);
  CHECK(engine_permutation(3, 0, 10) == seed3_epoch0);
}

TEST_CASE("shuffle: the loader delivers the reference order for 0 and 2 workers", "[data][shuffle]") {
  IndexDataset ds(50);
  for (int workers : {0, 2}) {
    LoaderOptions o;
    o.batch_size = 7;
    o.drop_last = false;
    o.workers = workers;
    o.prefetch = 2;
    o.seed = 21;
    Loader loader(ds, o);
    for (int64_t epoch : {0, 1, 2}) {
      loader.start_epoch(epoch);
      std::vector<int64_t> order;
      while (const HostBatch* b = loader.next()) {
        for (int i = 0; i < b->count; ++i) order.push_back(b->labels[i]);
        loader.release(b);
      }
      INFO("workers " << workers << " epoch " << epoch);
      CHECK(order == reference_permutation(21, epoch, 50));
    }
  }
}

// Each value lands at each position with probability 1/n. Over seeds
// 0..5999 at n = 6: 36 cells of expected count 1000, 25 degrees of freedom
// (mean 25, sd 7.1); the bound 80 is beyond the 1e-7 tail, so a fair shuffle
// never fails it and the seed set is fixed, so the figure is the same on
// every run. Sattolo's cycle leaves the diagonal empty: chi-square ~ 7000.
TEST_CASE("shuffle: every value is equally likely at every position", "[data][shuffle]") {
  constexpr int64_t n = 6, seeds = 6000;
  std::vector<int64_t> counts(n * n, 0);
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    const auto order = engine_permutation(seed, 0, n);
    for (int64_t pos = 0; pos < n; ++pos) ++counts[static_cast<size_t>(order[pos] * n + pos)];
  }
  const double x2 = chi_square(counts, static_cast<double>(seeds) / n);
  INFO("chi-square " << x2 << " over " << n * n << " cells (25 degrees of freedom)");
  CHECK(x2 < 80.0);
  for (int64_t v = 0; v < n; ++v) {
    INFO("value " << v << " stayed in place " << counts[static_cast<size_t>(v * n + v)] << " times");
    CHECK(counts[static_cast<size_t>(v * n + v)] > 0);
  }
}

// Each of the 24 permutations of four is equally likely: 24000 epochs (seed
// 7, epochs 0..23999), expected 1000 each, 23 degrees of freedom (mean 23,
// sd 6.8); bound 75, again far in the tail. Sattolo's cycle makes only the
// 6 cyclic permutations.
TEST_CASE("shuffle: every permutation of four is equally likely", "[data][shuffle]") {
  constexpr int64_t n = 4, epochs = 24000;
  std::map<std::vector<int64_t>, int64_t> seen;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) ++seen[engine_permutation(7, epoch, n)];
  CHECK(seen.size() == 24);
  std::vector<int64_t> counts;
  for (const auto& [perm, c] : seen) counts.push_back(c);
  counts.resize(24, 0);
  const double x2 = chi_square(counts, epochs / 24.0);
  INFO("chi-square " << x2 << " over 24 permutations (23 degrees of freedom)");
  CHECK(x2 < 75.0);
}
