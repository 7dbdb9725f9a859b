// engine/distributed/nccl_communicator.cpp: the Communicator over NCCL
// between GPU ranks (as PyTorch's DDP, Horovod and llm.c use it), on the
// library engine/device/nccl_api.h loads at run time. The communicator is
// non-blocking (ncclConfig_t.blocking = 0): every wait (joining, a sum)
// polls ncclCommGetAsyncError beside the deadline and the other ranks' pid
// files, and aborts the communicator rather than hang when a rank is gone.
// Host-memory sums (loss totals, gathers) go through a small device buffer
// on a stream of the communicator's own.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/device/nccl_api.h"
#include "engine/distributed/communicator.h"

namespace xrun::dist {

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(std::string(what) + ": " + cudaGetErrorString(e));
}

using Clock = std::chrono::steady_clock;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankInfo& info, int device) : info_(info), device_(device) {}
  ~NcclCommunicator() override {
    if (comm_) {
      // After a failure the communicator may never quiesce: abort it then.
      ncclResult_t state = ncclSuccess;
      if (failed_ || api().get_async_error(comm_, &state) != ncclSuccess || state != ncclSuccess) {
        api().abort(comm_);
      } else {
        api().finalize(comm_);
        wait_quiet("finalize", Clock::now() + info_.timeout, nullptr, /*throwing=*/false);
        api().destroy(comm_);
      }
    }
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    if (done_) cudaEventDestroy(done_);
    if (queued_) cudaEventDestroy(queued_);
    for (auto& [start, end] : timing_) {
      cudaEventDestroy(start);
      cudaEventDestroy(end);
    }
  }

  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  std::string backend() const override { return "nccl"; }
  bool sums_device_memory() const override { return true; }

  void join(const ncclUniqueId& id) {
    cuda_ok(cudaSetDevice(device_), "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_ok(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "cudaEventCreate");
    // The host sums' buffer, before the step loop (cudaMalloc synchronises
    // the device); a larger gather grows it once.
    scratch_bytes_ = 64 << 10;
    cuda_ok(cudaMalloc(&scratch_, scratch_bytes_), "cudaMalloc for host-memory sums");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = api().init_rank_config(&comm_, info_.size, id, info_.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) fail("joining the others", r);
    wait_quiet("joining the others", Clock::now() + info_.timeout, nullptr, true);
  }

  void all_reduce_sum_device(float* data, size_t n, void* stream) override {
    if (n == 0) return;
    sum(data, n, ncclFloat, static_cast<cudaStream_t>(stream));
  }
  void all_reduce_sum_device_async(float* data, size_t n, void* stream) override {
    if (n == 0) return;
    if (pending_ == timing_.size()) {
      std::pair<cudaEvent_t, cudaEvent_t> e{};
      cuda_ok(cudaEventCreate(&e.first), "cudaEventCreate");
      cuda_ok(cudaEventCreate(&e.second), "cudaEventCreate");
      timing_.push_back(e);
    }
    // After what `stream` holds now (the backward kernels of these layers),
    // on this communicator's stream, beside the rest of the backward pass.
    cuda_ok(cudaEventRecord(queued_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    cuda_ok(cudaStreamWaitEvent(stream_, queued_, 0), "cudaStreamWaitEvent");
    cuda_ok(cudaEventRecord(timing_[pending_].first, stream_), "cudaEventRecord");
    const ncclResult_t r = api().all_reduce(data, data, n, ncclFloat, ncclSum, comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) fail("all-reduce", r);
    settle("all-reduce");
    cuda_ok(cudaEventRecord(timing_[pending_].second, stream_), "cudaEventRecord");
    ++pending_;
  }
  double wait_device(void* stream) override {
    if (pending_ == 0) return 0;
    cuda_ok(cudaEventRecord(done_, stream_), "cudaEventRecord");
    wait_quiet("all-reduce", Clock::now() + info_.timeout, done_, true);
    cuda_ok(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0),
            "cudaStreamWaitEvent");
    double busy = 0;
    for (size_t k = 0; k < pending_; ++k) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, timing_[k].first, timing_[k].second) == cudaSuccess)
        busy += ms;
    }
    pending_ = 0;
    return busy;
  }
  void all_reduce_sum(float* data, size_t n) override { host_sum(data, n, ncclFloat); }
  void all_reduce_sum(double* data, size_t n) override { host_sum(data, n, ncclDouble); }
  void barrier() override {
    float one = 1;
    host_sum(&one, 1, ncclFloat);
  }

 private:
  static const NcclApi& api() { return *nccl_api(); }

  template <typename T>
  void host_sum(T* data, size_t n, ncclDataType_t type) {
    if (n == 0) return;
    const size_t bytes = n * sizeof(T);
    cuda_ok(cudaSetDevice(device_), "cudaSetDevice");
    if (bytes > scratch_bytes_) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      cuda_ok(cudaMalloc(&scratch_, bytes), "cudaMalloc for a host-memory sum");
      scratch_bytes_ = bytes;
    }
    cuda_ok(cudaMemcpyAsync(scratch_, data, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy");
    sum(scratch_, n, type, stream_);
    cuda_ok(cudaMemcpyAsync(data, scratch_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // In place, queued on `stream`; returns when it is done.
  void sum(void* data, size_t n, ncclDataType_t type, cudaStream_t stream) {
    const ncclResult_t r = api().all_reduce(data, data, n, type, ncclSum, comm_, stream);
    if (r != ncclSuccess && r != ncclInProgress) fail("all-reduce", r);
    settle("all-reduce");
    cuda_ok(cudaEventRecord(done_, stream), "cudaEventRecord");
    wait_quiet("all-reduce", Clock::now() + info_.timeout, done_, true);
  }

  // A non-blocking communicator may still be queuing the last call
  // (ncclInProgress): NCCL asks for its state to settle before the next.
  void settle(const char* what) {
    const auto deadline = Clock::now() + info_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = api().get_async_error(comm_, &state);
      if (q != ncclSuccess) state = q;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, state);
      if (Clock::now() >= deadline) wait_quiet(what, deadline, nullptr, true);
      std::this_thread::yield();
    }
  }

  // Polls until the communicator is idle (no ncclInProgress) and `event`
  // (if any) has completed: CommError on an NCCL error, a rank gone or the
  // deadline, after aborting the communicator.
  bool wait_quiet(const char* what, Clock::time_point deadline, cudaEvent_t event, bool throwing) {
    auto next_look = Clock::now() + std::chrono::seconds(1);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = api().get_async_error(comm_, &state);
      if (q != ncclSuccess) state = q;
      if (state != ncclSuccess && state != ncclInProgress) {
        if (!throwing) return false;
        fail(what, state);
      }
      bool event_done = true;
      if (event) {
        const cudaError_t e = cudaEventQuery(event);
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          failed_ = true;
          if (!throwing) return false;
          throw CommError(std::string(what) + " on rank " + std::to_string(info_.rank) +
                          ": CUDA: " + cudaGetErrorString(e));
        }
        event_done = e == cudaSuccess;
      }
      if (state == ncclSuccess && event_done) return true;
      const auto now = Clock::now();
      if (now >= next_look || now >= deadline) {
        next_look = now + std::chrono::seconds(1);
        const std::string gone = info_.size > 1 ? lost_ranks(info_) : "";
        if (!gone.empty() || now >= deadline) {
          failed_ = true;
          if (!throwing) return false;
          throw CommError(std::string(what) + " between " + std::to_string(info_.size) +
                          " ranks failed on rank " + std::to_string(info_.rank) + ": " +
                          (gone.empty() ? "no answer within " +
                                              std::to_string(std::chrono::duration_cast<
                                                  std::chrono::seconds>(info_.timeout).count()) +
                                              " s (distributed.timeout_s)"
                                        : gone));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  [[noreturn]] void fail(const char* what, ncclResult_t r) {
    failed_ = true;
    std::string detail = api().error_string(r);
    if (const char* last = comm_ ? api().last_error(comm_) : nullptr; last && *last)
      detail += " (" + std::string(last) + ")";
    const std::string gone = info_.size > 1 ? lost_ranks(info_) : "";
    throw CommError(std::string(what) + " between " + std::to_string(info_.size) +
                    " ranks failed on rank " + std::to_string(info_.rank) + ": " +
                    (gone.empty() ? "" : gone + "; ") + "NCCL: " + detail);
  }

  RankInfo info_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  cudaEvent_t queued_ = nullptr;  // the caller's stream, before an async sum
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timing_;  // each async sum's start, end
  size_t pending_ = 0;  // async sums queued since the last wait_device
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  bool failed_ = false;
};

// Rank 0's unique id to every rank through the rendezvous directory:
// written to a temporary name, then renamed, so a reader sees all of it or
// nothing.
ncclUniqueId share_unique_id(const RankInfo& info) {
  ncclUniqueId id{};
  namespace fs = std::filesystem;
  const fs::path file = fs::path(info.rendezvous) / "nccl-id";
  if (info.rank == 0) {
    if (const ncclResult_t r = nccl_api()->get_unique_id(&id); r != ncclSuccess)
      throw CommError(std::string("ncclGetUniqueId: ") + nccl_api()->error_string(r));
    if (info.size == 1) return id;
    const fs::path tmp = file.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id.internal, sizeof id.internal);
      if (!out) throw CommError("cannot write NCCL's unique id to " + tmp.string());
    }
    std::error_code ec;
    // The id holds the magic NCCL's bootstrap checks every connection for:
    // the user's alone, as the folder (0700) is.
    fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
    fs::rename(tmp, file, ec);
    if (ec) throw CommError("cannot write NCCL's unique id to " + file.string() + ": " + ec.message());
    return id;
  }
  const auto deadline = Clock::now() + info.timeout;
  for (int look = 0;; ++look) {
    std::ifstream in(file, std::ios::binary);
    if (in && in.read(id.internal, sizeof id.internal)) return id;
    if (Clock::now() >= deadline)
      throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                      " waited " +
                      std::to_string(
                          std::chrono::duration_cast<std::chrono::seconds>(info.timeout).count()) +
                      " s for rank 0's NCCL id in " + file.string());
    if (look % 20 == 19)
      if (const std::string gone = lost_ranks(info); !gone.empty())
        throw CommError("rank " + std::to_string(info.rank) + " could not join the others: " + gone);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::unique_ptr<Communicator> connect_nccl(const RankInfo& info, int device) {
  std::string why_not;
  if (!nccl_api(&why_not)) throw CommError(why_not);
  if (info.size > 1 && info.rendezvous.empty())
    throw CommError("NCCL ranks need a rendezvous directory for rank 0's unique id");
  leave_pid_file(info);
  auto comm = std::make_unique<NcclCommunicator>(info, device);
  comm->join(share_unique_id(info));
  return comm;
}

}  // namespace xrun::dist
