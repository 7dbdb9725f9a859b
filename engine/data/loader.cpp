// engine/data/loader.cpp: the batch loader. `workers` threads take batch
// numbers in order and fill ring slots; batch b of an epoch always goes to
// slot (b - first_batch) % prefetch, so next() hands batches out strictly in
// order and a worker waits (condition variable) while its slot is still
// ready or held by the caller. A generation counter, bumped by start_epoch
// and the destructor, makes workers abandon stale batches mid-fill. Shuffle
// order and augmentation draws depend only on (seed, epoch, position).
#include "engine/data/loader.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/data/image_ops.h"
#include "engine/data/random.h"

namespace xrun::data {

void epoch_permutation(uint64_t seed, int64_t epoch, int64_t* order, int64_t n) {
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch), 0x5bff1e));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(static_cast<uint64_t>(i) + 1, [&] { return rng(); }));
    std::swap(order[i], order[j]);
  }
}

void augment_sample(const uint8_t* src, uint8_t* dst, int c, int h, int w, bool random_crop,
                    bool flip, const AugmentDraw& draw) {
  if (random_crop)
    pad_crop(src, dst, c, h, w, kCropPad, draw.crop_y, draw.crop_x);
  else
    std::memcpy(dst, src, static_cast<size_t>(c) * h * w);
  if (flip && draw.flip) hflip(dst, c, h, w);
}

AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t position) {
  uint64_t s = mix_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(position), 0xa09);
  auto next = [&] { return splitmix64(s); };
  AugmentDraw d;
  d.crop_y = static_cast<int>(uniform_below(2 * kCropPad + 1, next));
  d.crop_x = static_cast<int>(uniform_below(2 * kCropPad + 1, next));
  d.flip = uniform_below(2, next) == 1;
  return d;
}

namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

enum class SlotState { free, filling, ready, taken };

struct Slot {
  SlotState state = SlotState::free;
  uint64_t generation = 0;
  HostBatch batch;  // images/labels point into the loader's one allocation
};

}  // namespace

struct Loader::Impl {
  const Dataset& dataset;
  LoaderOptions opt;
  int channels, height, width;
  size_t sample_bytes;
  int64_t samples;
  int64_t per_epoch;

  void* block = nullptr;  // every slot's images and labels
  std::vector<Slot> slots;
  std::vector<int64_t> order;                 // this epoch's shuffle
  std::vector<std::vector<uint8_t>> scratch;  // one sample per worker (crop source)

  std::mutex mu;
  std::condition_variable work_cv;   // workers: a batch can be assigned, or stop
  std::condition_variable ready_cv;  // caller: a batch is ready / workers are idle
  std::atomic<uint64_t> generation{0};
  bool started = false, stopping = false, failed = false;
  int64_t epoch = 0, first = 0, next_assign = 0, next_deliver = 0;
  int busy = 0;  // workers filling a slot right now
  std::exception_ptr error;  // the earliest failed batch's exception
  int64_t error_batch = 0;
  std::vector<std::thread> threads;

  Impl(const Dataset& ds, LoaderOptions o) : dataset(ds), opt(std::move(o)) {
    if (opt.batch_size < 1) throw std::invalid_argument("Loader: batch_size must be >= 1");
    if (opt.prefetch < 1) throw std::invalid_argument("Loader: prefetch must be >= 1");
    if (opt.workers < 0) throw std::invalid_argument("Loader: workers must be >= 0");
    if (opt.ranks < 1 || opt.rank < 0 || opt.rank >= opt.ranks)
      throw std::invalid_argument("Loader: rank must be in [0, ranks)");
    if (bool(opt.allocator.allocate) != bool(opt.allocator.release))
      throw std::invalid_argument("Loader: HostAllocator needs both allocate and release");
    if (!opt.allocator.allocate) {
      opt.allocator.allocate = [](size_t n) { return std::aligned_alloc(64, round_up(n, 64)); };
      opt.allocator.release = [](void* p) { std::free(p); };
    }
    channels = dataset.channels();
    height = dataset.height();
    width = dataset.width();
    sample_bytes = static_cast<size_t>(channels) * height * width;
    samples = dataset.size();
    // Global batch b is positions [b * stride, (b + 1) * stride) of the
    // epoch's order; this rank's slice of it starts `offset` in.
    const int64_t global = int64_t{opt.batch_size} * opt.ranks;
    const int64_t offset = int64_t{opt.batch_size} * opt.rank;
    per_epoch = opt.drop_last       ? samples / global
                : samples <= offset ? 0
                                    : (samples - offset + global - 1) / global;

    const size_t image_bytes = round_up(sample_bytes * opt.batch_size, 64);
    const size_t label_bytes = round_up(sizeof(int32_t) * opt.batch_size, 64);
    const size_t draw_bytes =
        opt.augment_elsewhere ? round_up(sizeof(int32_t) * 3 * opt.batch_size, 64) : 0;
    const size_t stride = image_bytes + label_bytes + draw_bytes;
    const size_t total = stride * opt.prefetch;
    block = opt.allocator.allocate(total);
    if (!block) throw std::bad_alloc();
    std::memset(block, 0, total);
    slots.resize(opt.prefetch);
    for (int i = 0; i < opt.prefetch; ++i) {
      auto* base = static_cast<uint8_t*>(block) + stride * i;
      slots[i].batch.images = base;
      slots[i].batch.labels = reinterpret_cast<const int32_t*>(base + image_bytes);
      if (draw_bytes)
        slots[i].batch.draws = reinterpret_cast<const int32_t*>(base + image_bytes + label_bytes);
    }
    if (opt.shuffle) order.resize(samples);
    scratch.assign(std::max(opt.workers, 1), std::vector<uint8_t>(sample_bytes));
    try {
      for (int w = 0; w < opt.workers; ++w) threads.emplace_back([this, w] { work(w); });
    } catch (...) {
      shut_down();
      throw;
    }
  }

  ~Impl() {
    shut_down();
    opt.allocator.release(block);
  }

  void shut_down() {
    {
      std::lock_guard lk(mu);
      stopping = true;
      generation.fetch_add(1);
    }
    work_cv.notify_all();
    ready_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  Slot& slot_of(int64_t batch) { return slots[(batch - first) % opt.prefetch]; }

  // Fills `slot` with batch `b` of the current epoch. With `check`, stops
  // early (returns false) once the generation moves past `gen`.
  bool fill(int64_t b, Slot& slot, uint8_t* tmp, uint64_t gen, bool check) {
    auto* images = const_cast<uint8_t*>(slot.batch.images);
    auto* labels = const_cast<int32_t*>(slot.batch.labels);
    const int64_t begin = (b * opt.ranks + opt.rank) * opt.batch_size;
    const int count = static_cast<int>(std::min<int64_t>(opt.batch_size, samples - begin));
    const bool augment = (opt.random_crop || opt.hflip) && !opt.augment_elsewhere;
    auto* draws = const_cast<int32_t*>(slot.batch.draws);
    for (int i = 0; i < count; ++i) {
      if (check && generation.load(std::memory_order_relaxed) != gen) return false;
      const int64_t pos = begin + i;
      const int64_t index = opt.shuffle ? order[pos] : pos;
      uint8_t* dst = images + sample_bytes * i;
      if (draws) {
        const AugmentDraw d = augment_draw(opt.seed, epoch, pos);
        draws[3 * i] = d.crop_y;
        draws[3 * i + 1] = d.crop_x;
        draws[3 * i + 2] = d.flip ? 1 : 0;
      }
      if (!augment) {
        dataset.get(index, dst, &labels[i]);
        continue;
      }
      dataset.get(index, tmp, &labels[i]);
      augment_sample(tmp, dst, channels, height, width, opt.random_crop, opt.hflip,
                     augment_draw(opt.seed, epoch, pos));
    }
    if (count < opt.batch_size) {
      std::memset(images + sample_bytes * count, 0, sample_bytes * (opt.batch_size - count));
      std::memset(labels + count, 0, sizeof(int32_t) * (opt.batch_size - count));
    }
    slot.batch.count = count;
    slot.batch.epoch = epoch;
    slot.batch.index = b;
    return true;
  }

  bool can_assign() {
    return started && !failed && next_assign < per_epoch &&
           slot_of(next_assign).state == SlotState::free;
  }

  void work(int w) {
    if (opt.on_worker_start) opt.on_worker_start(w);
    std::unique_lock lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] { return stopping || can_assign(); });
      if (stopping) return;
      const int64_t b = next_assign++;
      Slot& slot = slot_of(b);
      const uint64_t gen = generation.load();
      slot.state = SlotState::filling;
      slot.generation = gen;
      ++busy;
      lk.unlock();
      bool done = false;
      std::exception_ptr err;
      try {
        done = fill(b, slot, scratch[w].data(), gen, true);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      --busy;
      slot.state = SlotState::free;
      if (gen == generation.load()) {
        if (err) {
          failed = true;  // no new batches; the ones before it still arrive
          if (!error || b < error_batch) {
            error = err;
            error_batch = b;
          }
        } else if (done) {
          slot.state = SlotState::ready;
        }
      }
      ready_cv.notify_all();
      work_cv.notify_all();
    }
  }

  void start_epoch(int64_t e, int64_t first_batch) {
    if (first_batch < 0 || first_batch > per_epoch)
      throw std::out_of_range("Loader::start_epoch: first_batch " + std::to_string(first_batch) +
                              " outside 0.." + std::to_string(per_epoch));
    std::unique_lock lk(mu);
    started = false;  // no new assignments while the old epoch drains
    const uint64_t gen = generation.fetch_add(1) + 1;
    ready_cv.wait(lk, [&] { return busy == 0; });  // stale fills notice the new generation
    for (auto& s : slots) {
      if (s.state == SlotState::ready) s.state = SlotState::free;
      s.generation = gen;
    }
    epoch = e;
    first = next_assign = next_deliver = first_batch;
    failed = false;
    error = nullptr;
    if (opt.shuffle) epoch_permutation(opt.seed, e, order.data(), samples);
    started = true;
    lk.unlock();
    work_cv.notify_all();
  }

  [[noreturn]] static void slots_exhausted() {
    throw std::logic_error(
        "Loader::next: the slot for the next batch is still held; release() batches "
        "before taking more than `prefetch` of them");
  }

  const HostBatch* next(double* wait_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    auto report = [&] {
      if (wait_ms)
        *wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
    };
    std::unique_lock lk(mu);
    if (!started || next_deliver >= per_epoch) {
      report();
      return nullptr;
    }
    if (opt.workers == 0) {  // made here, on the caller's thread
      Slot& slot = slot_of(next_deliver);
      if (slot.state == SlotState::taken) slots_exhausted();
      fill(next_deliver, slot, scratch[0].data(), 0, false);
      slot.state = SlotState::taken;
      ++next_deliver;
      report();
      return &slot.batch;
    }
    const uint64_t gen = generation.load();
    for (;;) {
      if (error && next_deliver >= error_batch) {
        const std::exception_ptr e = error;
        lk.unlock();
        report();
        std::rethrow_exception(e);
      }
      Slot& slot = slot_of(next_deliver);
      if (slot.state == SlotState::ready && slot.generation == gen &&
          slot.batch.index == next_deliver) {
        slot.state = SlotState::taken;
        ++next_deliver;
        lk.unlock();
        report();
        return &slot.batch;
      }
      if (slot.state == SlotState::taken) slots_exhausted();
      ready_cv.wait(lk);
    }
  }

  void release(const HostBatch* batch) {
    if (!batch) return;
    {
      std::lock_guard lk(mu);
      for (auto& s : slots)
        if (&s.batch == batch) {
          if (s.state != SlotState::taken)
            throw std::logic_error("Loader::release: batch was not taken by next()");
          s.state = SlotState::free;
          break;
        }
    }
    work_cv.notify_all();
  }
};

Loader::Loader(const Dataset& dataset, LoaderOptions options)
    : impl_(std::make_unique<Impl>(dataset, std::move(options))) {}
Loader::~Loader() = default;
int64_t Loader::batches_per_epoch() const { return impl_->per_epoch; }
void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  impl_->start_epoch(epoch, first_batch);
}
const HostBatch* Loader::next(double* wait_ms) { return impl_->next(wait_ms); }
void Loader::release(const HostBatch* batch) { impl_->release(batch); }

}  // namespace xrun::data
