// store/step_writer.cpp: StepWriter, the background writer of per-step
// records. push() appends to a vector under a mutex and returns; a thread with
// its own connection takes the pending rows whenever a batch is full, a flush
// is asked for, or half a second has passed, and commits them batch_size rows
// per BEGIN IMMEDIATE transaction with one prepared statement. A failed batch
// is rolled back and its error kept for the next flush() to rethrow; later
// batches are still attempted.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "store/internal.h"
#include "store/store.h"

namespace xrun::store {

struct StepWriter::Impl {
  Impl(const std::string& db_path, std::string uuid_, size_t batch)
      : store(db_path),
        uuid(std::move(uuid_)),
        run(detail::run_id(store.handle(), store.path(), uuid)),
        batch_size(batch == 0 ? 1 : batch),
        insert(store.handle(), store.path(), detail::kInsertStepSql) {}

  void loop();

  Store store;  // the writer thread's own connection
  std::string uuid;
  int64_t run;
  size_t batch_size;
  detail::Statement insert;

  std::mutex m;
  std::condition_variable wake;  // the writer waits for rows, a flush or stop
  std::condition_variable done;  // flush() waits for rows to be handled
  std::vector<StepRecord> pending;
  uint64_t pushed = 0;   // rows handed to push()
  uint64_t handled = 0;  // rows committed or lost to a reported error
  int flushers = 0;
  bool stop = false;
  std::exception_ptr error;  // first error not yet rethrown by flush()
  std::atomic<bool> failing{false};  // a batch has failed (disk full, I/O error)
  std::thread thread;
};

void StepWriter::Impl::loop() {
  std::vector<StepRecord> batch;
  std::unique_lock<std::mutex> lock(m);
  for (;;) {
    wake.wait_for(lock, std::chrono::milliseconds(500), [&] {
      return stop || pending.size() >= batch_size || (flushers > 0 && !pending.empty());
    });
    if (pending.empty()) {
      if (stop) return;
      continue;
    }
    batch.clear();
    std::swap(batch, pending);
    lock.unlock();
    for (size_t first = 0; first < batch.size(); first += batch_size) {
      const size_t n = std::min(batch_size, batch.size() - first);
      std::exception_ptr failed;
      try {
        detail::Transaction tx(store.handle(), store.path());
        detail::insert_steps(store.handle(), store.path(), run,
                             std::span<const StepRecord>(batch).subspan(first, n), &insert);
        tx.commit();
      } catch (...) {
        insert.reset();
        failed = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> g(m);
        handled += n;
        if (failed && !error) error = failed;
        if (failed) failing = true;
      }
      done.notify_all();
    }
    lock.lock();
  }
}

StepWriter::StepWriter(const std::string& db_path, std::string uuid, size_t batch_size)
    : impl_(std::make_unique<Impl>(db_path, std::move(uuid), batch_size)) {
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

StepWriter::~StepWriter() {
  {
    std::lock_guard<std::mutex> g(impl_->m);
    impl_->stop = true;
  }
  impl_->wake.notify_one();
  impl_->thread.join();
  if (impl_->error) {
    try {
      std::rethrow_exception(impl_->error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "xrun: steps of run %s not stored: %s\n", impl_->uuid.c_str(),
                   e.what());
    } catch (...) {
    }
  }
}

void StepWriter::push(const StepRecord& step) {
  bool full;
  {
    std::lock_guard<std::mutex> g(impl_->m);
    impl_->pending.push_back(step);
    ++impl_->pushed;
    full = impl_->pending.size() >= impl_->batch_size;
  }
  if (full) impl_->wake.notify_one();
}

bool StepWriter::failing() const { return impl_->failing.load(); }

void StepWriter::flush() {
  std::unique_lock<std::mutex> lock(impl_->m);
  const uint64_t target = impl_->pushed;
  ++impl_->flushers;
  impl_->wake.notify_one();
  impl_->done.wait(lock, [&] { return impl_->handled >= target; });
  --impl_->flushers;
  if (impl_->error) {
    std::exception_ptr e = impl_->error;
    impl_->error = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace xrun::store
