// engine/distributed/gloo_communicator.cpp: the Communicator over gloo (the
// collective library PyTorch uses between CPU processes; Debian's
// libgloo-dev): TCP pairs between every two ranks, addresses exchanged
// through a FileStore in the rendezvous directory, ring all-reduce. gloo's
// exceptions become CommError with the ranks known gone.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <utility>

#include "engine/distributed/communicator.h"

namespace xrun::dist {

namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const RankInfo& info, std::shared_ptr<gloo::rendezvous::Context> ctx)
      : info_(info), ctx_(std::move(ctx)) {}
  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  std::string backend() const override { return "gloo"; }
  void all_reduce_sum(float* data, size_t n) override { reduce(data, n); }
  void all_reduce_sum(double* data, size_t n) override { reduce(data, n); }
  void barrier() override {
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(next_tag());
      gloo::barrier(opts);
    });
  }

 private:
  template <typename T>
  void reduce(T* data, size_t n) {
    if (n == 0) return;
    guarded("all-reduce", [&] {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(data, n);  // in place
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
      opts.setTag(next_tag());
      gloo::allreduce(opts);
    });
  }
  template <typename F>
  void guarded(const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {  // gloo::Exception, or an EnforceNotMet
      std::string gone = lost_ranks(info_);
      throw CommError(std::string(what) + " between " + std::to_string(info_.size) +
                      " ranks failed on rank " + std::to_string(info_.rank) + ": " +
                      (gone.empty() ? "" : gone + "; ") + "gloo: " + e.what());
    }
  }
  uint32_t next_tag() { return tag_++; }

  RankInfo info_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint32_t tag_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> connect_gloo(const RankInfo& info) {
  leave_pid_file(info);
  if (const std::string problem = address_problem(info.host); !problem.empty())
    throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                    " cannot listen: " + problem + " (XRUN_RANK_HOST, or this host's name)");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = info.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(info.rendezvous);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(info.rank, info.size);
    ctx->setTimeout(info.timeout);
    ctx->connectFullMesh(store, device);
    return std::make_unique<GlooCommunicator>(info, std::move(ctx));
  } catch (const std::exception& e) {  // gloo::Exception, or an EnforceNotMet
    std::string gone = lost_ranks(info);
    throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                    " could not join the others through " + info.rendezvous + ": " +
                    (gone.empty() ? "" : gone + "; ") + "gloo: " + e.what());
  }
}

}  // namespace xrun::dist
