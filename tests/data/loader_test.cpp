// tests/data/loader_test.cpp: the batch loader over an in-memory dataset
// whose label is the sample index: each epoch covers every sample once, the
// order depends on (seed, epoch) only, output is identical for any worker
// count with augmentation on, crop/flip match their draws, drop_last,
// resume, errors from get(), and prompt shutdown mid-epoch.
#include "catch2_compat.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <thread>

#include "engine/data/image_ops.h"
#include "engine/data/loader.h"
#include "engine/data/random.h"

using namespace xrun::data;
using Catch::Contains;

namespace {

// Sample i: pixels hashed from i (never 0, so zero padding is recognisable),
// label i. `hook(i)` runs first in get() (sleep, throw).
class TaggedDataset : public Dataset {
 public:
  TaggedDataset(int64_t n, int c, int h, int w, std::function<void(int64_t)> hook = {})
      : n_(n), c_(c), h_(h), w_(w), hook_(std::move(hook)) {}
  int64_t size() const override { return n_; }
  int channels() const override { return c_; }
  int height() const override { return h_; }
  int width() const override { return w_; }
  int num_classes() const override { return 10; }
  void get(int64_t index, uint8_t* chw, int32_t* label) const override {
    if (hook_) hook_(index);
    uint64_t s = static_cast<uint64_t>(index) * 1000003 + 17;
    for (size_t i = 0, n = sample_bytes(); i < n; ++i)
      chw[i] = static_cast<uint8_t>(1 + splitmix64(s) % 255);
    *label = static_cast<int32_t>(index);
  }
  std::string describe() const override { return "tagged"; }
  size_t sample_bytes() const { return static_cast<size_t>(c_) * h_ * w_; }
  std::vector<uint8_t> image(int64_t index) const {
    std::vector<uint8_t> out(sample_bytes());
    int32_t lab;
    get(index, out.data(), &lab);
    return out;
  }

 private:
  int64_t n_;
  int c_, h_, w_;
  std::function<void(int64_t)> hook_;
};

struct Batch {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  int count;
  int64_t epoch, index;
  bool operator==(const Batch&) const = default;
};

// Takes every batch of `epoch`, copying each, releasing as it goes.
std::vector<Batch> run_epoch(Loader& loader, const Dataset& ds, int batch_size, int64_t epoch,
                             int64_t first = 0) {
  loader.start_epoch(epoch, first);
  std::vector<Batch> out;
  const size_t sample = static_cast<size_t>(ds.channels()) * ds.height() * ds.width();
  while (const HostBatch* b = loader.next()) {
    out.push_back({std::vector<uint8_t>(b->images, b->images + sample * batch_size),
                   std::vector<int32_t>(b->labels, b->labels + batch_size), b->count, b->epoch,
                   b->index});
    loader.release(b);
  }
  return out;
}

std::vector<int32_t> order_of(const std::vector<Batch>& batches) {
  std::vector<int32_t> order;
  for (const auto& b : batches) order.insert(order.end(), b.labels.begin(), b.labels.begin() + b.count);
  return order;
}

LoaderOptions options(int batch, int workers, uint64_t seed = 3) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = 3;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("an epoch delivers every sample exactly once, in order", "[data][loader]") {
  TaggedDataset ds(103, 3, 4, 4);
  auto o = options(10, 2);
  o.drop_last = false;
  Loader loader(ds, o);
  REQUIRE(loader.batches_per_epoch() == 11);
  const auto batches = run_epoch(loader, ds, 10, 0);
  REQUIRE(batches.size() == 11);
  for (size_t i = 0; i < batches.size(); ++i) {
    CHECK(batches[i].index == static_cast<int64_t>(i));
    CHECK(batches[i].epoch == 0);
    CHECK(batches[i].count == (i < 10 ? 10 : 3));
  }
  auto order = order_of(batches);
  std::vector<int64_t> perm(103);
  epoch_permutation(3, 0, perm.data(), 103);
  CHECK(std::equal(order.begin(), order.end(), perm.begin()));
  std::sort(order.begin(), order.end());
  for (int i = 0; i < 103; ++i) REQUIRE(order[i] == i);
  // Pixels are the samples' own; the partial batch's spare room is zero.
  const auto& last = batches.back();
  for (int i = 0; i < 3; ++i)
    CHECK(std::equal(last.images.begin() + 48 * i, last.images.begin() + 48 * (i + 1),
                     ds.image(last.labels[i]).begin()));
  CHECK(std::all_of(last.images.begin() + 48 * 3, last.images.end(), [](uint8_t v) { return v == 0; }));
  CHECK(std::all_of(last.labels.begin() + 3, last.labels.end(), [](int32_t v) { return v == 0; }));
  CHECK(loader.next() == nullptr);  // stays done
}

TEST_CASE("shuffle order depends on seed and epoch only", "[data][loader]") {
  TaggedDataset ds(64, 1, 2, 2);
  Loader a(ds, options(8, 2, 11)), b(ds, options(8, 1, 11)), c(ds, options(8, 2, 12));
  const auto a0 = order_of(run_epoch(a, ds, 8, 0)), a1 = order_of(run_epoch(a, ds, 8, 1));
  CHECK(a0 != a1);
  CHECK(a0 == order_of(run_epoch(b, ds, 8, 0)));
  CHECK(a1 == order_of(run_epoch(b, ds, 8, 1)));
  CHECK(a0 != order_of(run_epoch(c, ds, 8, 0)));
  CHECK(a0 == order_of(run_epoch(a, ds, 8, 0)));  // going back to epoch 0 repeats it
  auto o = options(8, 2, 11);
  o.shuffle = false;
  Loader plain(ds, o);
  const auto p = order_of(run_epoch(plain, ds, 8, 4));
  for (int i = 0; i < 64; ++i) REQUIRE(p[i] == i);
}

TEST_CASE("output is identical for 0, 1 and 3 workers with augmentation", "[data][loader]") {
  TaggedDataset ds(77, 3, 12, 12);
  std::vector<std::vector<Batch>> runs;
  for (int workers : {0, 1, 3}) {
    auto o = options(8, workers, 99);
    o.random_crop = o.hflip = true;
    o.drop_last = false;
    Loader loader(ds, o);
    std::vector<Batch> all;
    for (int e = 0; e < 3; ++e) {
      auto batches = run_epoch(loader, ds, 8, e);
      all.insert(all.end(), batches.begin(), batches.end());
    }
    runs.push_back(std::move(all));
  }
  REQUIRE(runs[0].size() == 30);
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("drop_last drops only the final partial batch", "[data][loader]") {
  TaggedDataset ds(103, 1, 2, 2);
  Loader dropping(ds, options(10, 2));
  CHECK(dropping.batches_per_epoch() == 10);
  const auto batches = run_epoch(dropping, ds, 10, 0);
  REQUIRE(batches.size() == 10);
  for (const auto& b : batches) CHECK(b.count == 10);

  auto o = options(20, 0);
  o.drop_last = false;
  Loader keeping(ds, o);
  CHECK(keeping.batches_per_epoch() == 6);
  CHECK(run_epoch(keeping, ds, 20, 0).back().count == 3);

  TaggedDataset tiny(5, 1, 2, 2);
  Loader none(tiny, options(10, 2));
  CHECK(none.batches_per_epoch() == 0);
  CHECK(run_epoch(none, tiny, 10, 0).empty());
}

TEST_CASE("ranks take contiguous slices of each global batch: together one process's micro-batches",
          "[data][loader][distributed]") {
  TaggedDataset ds(103, 3, 6, 6);
  // One process, batch 8: its batches 2b and 2b+1 are the two micro-batches
  // of step b with accumulate = 2; rank r of 2 must see batch 2b+r.
  auto one = options(8, 2, 7);
  one.random_crop = one.hflip = true;
  Loader single(ds, one);
  const auto micro = run_epoch(single, ds, 8, 1);
  REQUIRE(micro.size() == 12);
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    auto o = one;
    o.rank = rank;
    o.ranks = 2;
    o.workers = rank;  // any worker count gives the same batches
    Loader sliced(ds, o);
    CHECK(sliced.batches_per_epoch() == 6);  // 103 / 16: the same steps on every rank
    const auto mine = run_epoch(sliced, ds, 8, 1);
    REQUIRE(mine.size() == 6);
    for (size_t b = 0; b < mine.size(); ++b) {
      CHECK(mine[b].images == micro[2 * b + rank].images);  // same pixels, same augmentation
      CHECK(mine[b].labels == micro[2 * b + rank].labels);
      CHECK(mine[b].index == static_cast<int64_t>(b));
    }
  }
  // Evaluation (no drop_last): every sample once over the ranks, the last
  // global batch cut short; 3 ranks of 10 over 103: rank 0 gets 4 batches
  // (positions 90..99 last), rank 1 one partial (100..102), rank 2 none.
  std::vector<int32_t> seen;
  const std::vector<int64_t> expected_batches = {4, 4, 3};
  for (int rank = 0; rank < 3; ++rank) {
    auto o = options(10, 1);
    o.shuffle = false;
    o.drop_last = false;
    o.rank = rank;
    o.ranks = 3;
    Loader eval(ds, o);
    CHECK(eval.batches_per_epoch() == expected_batches[rank]);
    const auto batches = run_epoch(eval, ds, 10, 0);
    REQUIRE(static_cast<int64_t>(batches.size()) == expected_batches[rank]);
    CHECK(batches.front().labels[0] == 10 * rank);
    for (const auto& b : batches) CHECK(b.count > 0);
    const auto order = order_of(batches);
    seen.insert(seen.end(), order.begin(), order.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int32_t> all(103);
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
  auto bad = options(8, 0);
  bad.rank = 2;
  bad.ranks = 2;
  CHECK_THROWS_AS(Loader(ds, bad), std::invalid_argument);
}

TEST_CASE("hflip and random_crop follow the draws for each position", "[data][loader]") {
  TaggedDataset ds(200, 2, 8, 10);
  const size_t sample = ds.sample_bytes();
  auto mirror = [&](std::vector<uint8_t> img) {
    hflip(img.data(), 2, 8, 10);
    return img;
  };

  SECTION("hflip: each image is the original or its mirror, as drawn") {
    auto o = options(16, 2, 5);
    o.hflip = true;
    o.drop_last = false;
    Loader loader(ds, o);
    int flipped = 0, position = 0;
    for (const auto& b : run_epoch(loader, ds, 16, 2))
      for (int i = 0; i < b.count; ++i, ++position) {
        const std::vector<uint8_t> got(b.images.begin() + sample * i, b.images.begin() + sample * (i + 1));
        const auto original = ds.image(b.labels[i]);
        const bool is_flipped = got == mirror(original);
        REQUIRE((is_flipped || got == original));
        CHECK(is_flipped == augment_draw(5, 2, position).flip);
        flipped += is_flipped;
      }
    CHECK(flipped > 70);
    CHECK(flipped < 130);
  }
  SECTION("random_crop: each image is a zero-padded crop at the drawn offset") {
    auto o = options(16, 3, 6);
    o.random_crop = true;
    o.hflip = true;
    Loader loader(ds, o);
    int position = 0;
    std::set<std::pair<int, int>> offsets;
    std::vector<uint8_t> crop(sample);
    for (const auto& b : run_epoch(loader, ds, 16, 1))
      for (int i = 0; i < b.count; ++i, ++position) {
        const std::vector<uint8_t> got(b.images.begin() + sample * i, b.images.begin() + sample * (i + 1));
        const auto original = ds.image(b.labels[i]);
        // Detect the offset and flip by trying all of them.
        int matches = 0;
        AugmentDraw found;
        for (int oy = 0; oy <= 8; ++oy)
          for (int ox = 0; ox <= 8; ++ox) {
            pad_crop(original.data(), crop.data(), 2, 8, 10, 4, oy, ox);
            for (bool flip : {false, true})
              if ((flip ? mirror(crop) : crop) == got) {
                ++matches;
                found = {oy, ox, flip};
              }
          }
        REQUIRE(matches == 1);
        const AugmentDraw want = augment_draw(6, 1, position);
        CHECK(found.crop_y == want.crop_y);
        CHECK(found.crop_x == want.crop_x);
        CHECK(found.flip == want.flip);
        offsets.insert({found.crop_y, found.crop_x});
      }
    CHECK(offsets.size() > 50);  // 81 possible offsets, 192 samples
  }
}

TEST_CASE("start_epoch resumes at first_batch and discards a running epoch", "[data][loader]") {
  TaggedDataset ds(120, 1, 3, 3, [](int64_t) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  Loader loader(ds, options(10, 3));
  const auto full = run_epoch(loader, ds, 10, 4);
  const auto resumed = run_epoch(loader, ds, 10, 4, 7);
  REQUIRE(resumed.size() == 5);
  for (size_t i = 0; i < resumed.size(); ++i) CHECK(resumed[i] == full[7 + i]);

  // Take two batches of epoch 5, then switch to epoch 6 while workers fill.
  loader.start_epoch(5);
  for (int i = 0; i < 2; ++i) loader.release(loader.next());
  const auto next = run_epoch(loader, ds, 10, 6);
  REQUIRE(next.size() == 12);
  CHECK(next[0].epoch == 6);
  CHECK(next[0].index == 0);
  std::vector<int64_t> perm(120);
  epoch_permutation(3, 6, perm.data(), 120);
  const auto order = order_of(next);
  CHECK(std::equal(order.begin(), order.end(), perm.begin()));
  CHECK_THROWS_AS(loader.start_epoch(0, 13), std::out_of_range);
}

TEST_CASE("an error in get() reaches next() after the batches before it", "[data][loader]") {
  for (int workers : {0, 1, 3}) {
    INFO("workers " << workers);
    TaggedDataset ds(100, 1, 2, 2, [](int64_t i) {
      if (i == 37) throw std::runtime_error("sample 37 is unreadable");
    });
    auto o = options(10, workers);
    o.shuffle = false;
    Loader loader(ds, o);
    loader.start_epoch(0);
    for (int b = 0; b < 3; ++b) {
      const HostBatch* batch = loader.next();
      REQUIRE(batch != nullptr);
      CHECK(batch->index == b);
      loader.release(batch);
    }
    CHECK_THROWS_WITH(loader.next(), Contains("sample 37 is unreadable"));
    CHECK_THROWS_WITH(loader.next(), Contains("sample 37 is unreadable"));
    // A new epoch starts clean (the error was one bad sample, it recurs at 37).
    loader.start_epoch(1, 4);
    const HostBatch* batch = loader.next();
    REQUIRE(batch != nullptr);
    CHECK(batch->index == 4);
    loader.release(batch);
  }
}

TEST_CASE("destroying a loader mid-epoch stops promptly", "[data][loader]") {
  TaggedDataset ds(100000, 3, 16, 16, [](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto o = options(64, 4);
    o.prefetch = 4;
    Loader loader(ds, o);
    loader.start_epoch(0);
    double wait_ms = -1;
    const HostBatch* b = loader.next(&wait_ms);
    REQUIRE(b != nullptr);
    CHECK(wait_ms > 10.0);  // 64 samples x 2 ms over 4 workers: it had to wait
    // Not released: destruction must not need it.
  }
  {
    Loader idle(ds, options(64, 4));  // never started
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 2.0);
}

TEST_CASE("slots come from the allocator once and are never reallocated", "[data][loader]") {
  TaggedDataset ds(50, 3, 5, 5);
  int allocations = 0, releases = 0;
  std::vector<uint8_t> arena;
  {
    auto o = options(4, 2);
    o.drop_last = false;
    o.allocator.allocate = [&](size_t n) {
      ++allocations;
      arena.resize(n + 64);
      return static_cast<void*>(arena.data());
    };
    o.allocator.release = [&](void*) { ++releases; };
    Loader loader(ds, o);
    for (int e = 0; e < 3; ++e) run_epoch(loader, ds, 4, e);
    CHECK(allocations == 1);
  }
  CHECK(releases == 1);

  Loader plain(ds, options(4, 1));
  plain.start_epoch(0);
  const HostBatch* b = plain.next();
  CHECK(reinterpret_cast<uintptr_t>(b->images) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b->labels) % 64 == 0);
  plain.release(b);
}

TEST_CASE("holding every slot makes next() throw instead of hanging", "[data][loader]") {
  TaggedDataset ds(100, 1, 2, 2);
  for (int workers : {0, 2}) {
    auto o = options(5, workers);
    o.prefetch = 2;
    Loader loader(ds, o);
    loader.start_epoch(0);
    const HostBatch* a = loader.next();
    const HostBatch* b = loader.next();
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    CHECK_THROWS_AS(loader.next(), std::logic_error);
    loader.release(a);
    const HostBatch* c = loader.next();
    REQUIRE(c != nullptr);
    CHECK(c->index == 2);
    loader.release(b);
    loader.release(c);
  }
}

TEST_CASE("next() before any epoch returns nullptr, bad options throw", "[data][loader]") {
  TaggedDataset ds(10, 1, 2, 2);
  Loader loader(ds, options(2, 1));
  CHECK(loader.next() == nullptr);
  auto o = options(0, 1);
  CHECK_THROWS_AS(Loader(ds, o), std::invalid_argument);
  o = options(2, 1);
  o.prefetch = 0;
  CHECK_THROWS_AS(Loader(ds, o), std::invalid_argument);
}

TEST_CASE("augment_elsewhere: raw samples plus the draws that reproduce the augmented batches",
          "[data][loader]") {
  // The CUDA backend augments on the device: the loader hands over the
  // samples as read and each sample's draw. Applied with augment_sample (the
  // reference the device kernel is tested against), they give exactly what
  // the augmenting loader gives.
  TaggedDataset ds(45, 3, 10, 10);
  auto o = options(8, 2, 123);
  o.random_crop = o.hflip = true;
  o.drop_last = false;
  Loader augmenting(ds, o);
  o.augment_elsewhere = true;
  Loader raw(ds, o);
  const size_t sample = ds.sample_bytes();
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<Batch> expected = run_epoch(augmenting, ds, 8, epoch);
    raw.start_epoch(epoch);
    size_t b = 0;
    int flips = 0;
    while (const HostBatch* batch = raw.next()) {
      REQUIRE(b < expected.size());
      REQUIRE(batch->draws != nullptr);
      CHECK(batch->count == expected[b].count);
      for (int i = 0; i < batch->count; ++i) {
        const int64_t pos = batch->index * 8 + i;
        const AugmentDraw d = augment_draw(123, epoch, pos);
        CHECK(batch->draws[3 * i] == d.crop_y);
        CHECK(batch->draws[3 * i + 1] == d.crop_x);
        CHECK(batch->draws[3 * i + 2] == (d.flip ? 1 : 0));
        flips += d.flip;
        const uint8_t* got = batch->images + sample * i;
        CHECK(std::equal(got, got + sample, ds.image(batch->labels[i]).begin()));  // as read
        std::vector<uint8_t> augmented(sample);
        augment_sample(got, augmented.data(), 3, 10, 10, true, true, d);
        CHECK(std::equal(augmented.begin(), augmented.end(),
                         expected[b].images.begin() + static_cast<std::ptrdiff_t>(sample * i)));
      }
      raw.release(batch);
      ++b;
    }
    CHECK(b == expected.size());
    CHECK(flips > 0);
  }
  // Without augment_elsewhere there are no draws.
  CHECK(run_epoch(augmenting, ds, 8, 0).size() == 6);
  augmenting.start_epoch(0);
  const HostBatch* plain = augmenting.next();
  REQUIRE(plain);
  CHECK(plain->draws == nullptr);
  augmenting.release(plain);
}
