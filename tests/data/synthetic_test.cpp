// tests/data/synthetic_test.cpp: synthetic data is deterministic per
// (seed, split, index) and across threads, labels are balanced, and
// learnable=true is separable by a nearest-class-mean classifier on raw
// pixels while learnable=false stays at chance.
#include "catch2_compat.h"

#include <set>
#include <thread>

#include "data_test_util.h"
#include "engine/data/dataset.h"

using namespace xrun::data;
using namespace xrun::data::testing;
using Catch::Contains;

namespace {

xrun::DataConfig synthetic(int size, int channels, int classes, int64_t samples, bool learnable) {
  auto cfg = config("synthetic", "", size, channels);
  cfg.num_classes = classes;
  cfg.samples = samples;
  cfg.test_samples = samples / 4;
  cfg.learnable = learnable;
  return cfg;
}

std::vector<uint8_t> all_bytes(const Dataset& ds, int64_t n) {
  const size_t sample = static_cast<size_t>(ds.channels()) * ds.height() * ds.width();
  std::vector<uint8_t> out(sample * n);
  for (int64_t i = 0; i < n; ++i) {
    int32_t lab;
    ds.get(i, out.data() + sample * i, &lab);
  }
  return out;
}

// Nearest-class-mean accuracy on `test` with means taken over `train`.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const size_t d = static_cast<size_t>(train.channels()) * train.height() * train.width();
  const int k = train.num_classes();
  std::vector<double> mean(k * d, 0.0);
  std::vector<int64_t> count(k, 0);
  std::vector<uint8_t> img(d);
  for (int64_t i = 0; i < train.size(); ++i) {
    int32_t lab;
    train.get(i, img.data(), &lab);
    ++count[lab];
    for (size_t j = 0; j < d; ++j) mean[lab * d + j] += img[j];
  }
  for (int c = 0; c < k; ++c)
    for (size_t j = 0; j < d; ++j) mean[c * d + j] /= std::max<int64_t>(count[c], 1);
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    int32_t lab;
    test.get(i, img.data(), &lab);
    int best = 0;
    double best_dist = 1e300;
    for (int c = 0; c < k; ++c) {
      double dist = 0;
      for (size_t j = 0; j < d; ++j) {
        const double e = img[j] - mean[c * d + j];
        dist += e * e;
      }
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += best == lab;
  }
  return static_cast<double>(correct) / test.size();
}

}  // namespace

TEST_CASE("synthetic data is deterministic per seed, split and index", "[data][synthetic]") {
  for (bool learnable : {true, false}) {
    const auto cfg = synthetic(20, 3, 10, 64, learnable);
    const auto a = all_bytes(*open_dataset(cfg, Split::train, 42), 64);
    CHECK(a == all_bytes(*open_dataset(cfg, Split::train, 42), 64));
    CHECK(a != all_bytes(*open_dataset(cfg, Split::train, 43), 64));
    CHECK(all_bytes(*open_dataset(cfg, Split::test, 42), 16) !=
          std::vector<uint8_t>(a.begin(), a.begin() + 16 * 3 * 20 * 20));
  }
}

TEST_CASE("synthetic get() is thread-safe and order-independent", "[data][synthetic]") {
  const auto cfg = synthetic(24, 3, 7, 200, true);
  auto ds = open_dataset(cfg, Split::train, 5);
  const auto serial = all_bytes(*ds, 200);
  const size_t sample = 3 * 24 * 24;
  std::vector<uint8_t> parallel(serial.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = 199 - t; i >= 0; i -= 4) {  // reverse order, interleaved
        int32_t lab;
        ds->get(i, parallel.data() + sample * i, &lab);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(parallel == serial);
}

TEST_CASE("synthetic labels are balanced", "[data][synthetic]") {
  auto check = [](int classes, int64_t n, int64_t lo, int64_t hi) {
    auto ds = open_dataset(synthetic(4, 1, classes, n, true), Split::train, 9);
    std::vector<int64_t> per_class(classes, 0);
    std::vector<uint8_t> img(16);
    for (int64_t i = 0; i < n; ++i) {
      int32_t lab = -1;
      ds->get(i, img.data(), &lab);
      REQUIRE(lab >= 0);
      REQUIRE(lab < classes);
      ++per_class[lab];
    }
    for (int64_t c : per_class) {
      CHECK(c >= lo);
      CHECK(c <= hi);
    }
  };
  check(10, 1000, 100, 100);
  check(10, 1005, 100, 101);
  check(3, 31, 10, 11);
  check(1000, 3000, 3, 3);
}

TEST_CASE("learnable synthetic classes are separable, noise is not", "[data][synthetic]") {
  auto cfg = synthetic(16, 3, 10, 2000, true);
  cfg.test_samples = 1000;
  const double learnable = nearest_mean_accuracy(*open_dataset(cfg, Split::train, 1),
                                                 *open_dataset(cfg, Split::test, 1));
  cfg.learnable = false;
  const double noise = nearest_mean_accuracy(*open_dataset(cfg, Split::train, 1),
                                             *open_dataset(cfg, Split::test, 1));
  INFO("learnable accuracy " << learnable << ", noise accuracy " << noise);
  CHECK(learnable > 0.9);
  CHECK(noise < 0.16);
}

TEST_CASE("synthetic sizes, limits and settings", "[data][synthetic]") {
  auto cfg = synthetic(224, 1, 1000, 50000, true);
  cfg.limit = 300;
  auto ds = open_dataset(cfg, Split::train, 0);
  CHECK(ds->size() == 300);
  CHECK(ds->channels() == 1);
  CHECK(ds->height() == 224);
  CHECK(ds->num_classes() == 1000);
  CHECK(ds->describe() ==
        "synthetic train: 300 images 1x224x224, 1000 classes, learnable patterns, seed 0");
  CHECK(open_dataset(cfg, Split::test, 0)->size() == 12500);
  std::vector<uint8_t> img(224 * 224);
  int32_t lab;
  ds->get(299, img.data(), &lab);
  CHECK(std::set<uint8_t>(img.begin(), img.end()).size() > 100);  // not flat

  cfg.test_samples = 0;
  CHECK_THROWS_WITH(open_dataset(cfg, Split::test, 0), Contains("test_samples must be >= 1"));
  cfg.num_classes = 0;
  CHECK_THROWS_AS(open_dataset(cfg, Split::train, 0), DataError);
  cfg.source = "imagenet";
  CHECK_THROWS_WITH(open_dataset(cfg, Split::train, 0), Contains("unknown data source 'imagenet'"));
}
