// engine/distributed/gloo_communicator.cpp: the Communicator over gloo (the
// collective library PyTorch uses between CPU processes; Debian's
// libgloo-dev): TCP pairs between every two ranks, addresses exchanged
// through a FileStore in the rendezvous directory, ring all-reduce. gloo's
// exceptions become CommError with the ranks known gone. gloo's pairs take
// whoever connects first and authenticate nothing, so before any data every
// rank proves to every other that it holds the run's secret (verify_peers);
// an exception on gloo's own thread (a message it cannot parse) ends the
// process with a message and exit code 1 instead of an abort.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>
#include <vector>

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

// gloo's FileStore waits 30 s for another rank's address whatever the
// context's timeout: a rank later than that failed the join although
// distributed.timeout_s allowed more. This one waits the rank's timeout.
class TimedFileStore final : public gloo::rendezvous::FileStore {
 public:
  TimedFileStore(const std::string& path, std::chrono::milliseconds timeout)
      : FileStore(path), timeout_(timeout) {}
  using FileStore::wait;
  void wait(const std::vector<std::string>& keys) override { FileStore::wait(keys, timeout_); }

 private:
  std::chrono::milliseconds timeout_;
};

// The slots of the proof exchange: a prefix no gloo collective uses.
constexpr uint8_t kProofSlotPrefix = 0x78;

// Every rank sends every other a fresh 32-byte nonce, answers each nonce it
// receives with rank_proof(secret, me, them, nonce) and checks each answer
// it receives. Nothing else has been sent on the pairs yet.
void verify_peers(gloo::Context& ctx, const RankInfo& info, const std::string& secret) {
  const int n = info.size, me = info.rank;
  const uint64_t nonce_slot = gloo::Slot::build(kProofSlotPrefix, 0);
  const uint64_t proof_slot = gloo::Slot::build(kProofSlotPrefix, 1);
  std::string nonce = random_bytes(32);
  std::vector<std::string> their_nonce(n, std::string(32, '\0')), my_proof(n),
      their_proof(n, std::string(32, '\0'));
  auto nonce_out = ctx.createUnboundBuffer(nonce.data(), nonce.size());
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> nonce_in(n), proof_in(n),
      proof_out(n);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    nonce_out->send(p, nonce_slot);
    nonce_in[p] = ctx.createUnboundBuffer(their_nonce[p].data(), 32);
    nonce_in[p]->recv(p, nonce_slot);
    proof_in[p] = ctx.createUnboundBuffer(their_proof[p].data(), 32);
    proof_in[p]->recv(p, proof_slot);
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    nonce_in[p]->waitRecv(info.timeout);
    my_proof[p] = rank_proof(secret, me, p, their_nonce[p]);
    proof_out[p] = ctx.createUnboundBuffer(my_proof[p].data(), my_proof[p].size());
    proof_out[p]->send(p, proof_slot);
  }
  std::string strangers;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    proof_in[p]->waitRecv(info.timeout);
    if (!same_proof(their_proof[p], rank_proof(secret, p, me, nonce)))
      strangers += (strangers.empty() ? "" : ", ") + std::to_string(p);
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    nonce_out->waitSend(info.timeout);
    proof_out[p]->waitSend(info.timeout);
  }
  if (!strangers.empty())
    throw CommError("rank " + std::to_string(me) + " of " + std::to_string(n) +
                    " refused to join: the process connected as rank " + strangers +
                    " did not prove it holds this run's secret (" + info.rendezvous +
                    "/secret): a process that is not one of the run's ranks connected to this "
                    "rank's port first; the run stops before any data was exchanged");
}

// What an exception thrown on gloo's own thread (its event loop reading a
// message it cannot take) does: a message and exit code 1, not an abort.
std::atomic<int> g_joined_rank{-1};

[[noreturn]] void gloo_thread_failed() {
  std::string what = "an unknown exception";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  }
  std::fprintf(stderr,
               "xrun: rank %d: the collectives' connection thread (gloo) failed: %s. A connection "
               "to this rank sent what gloo could not take (a process that is not one of the "
               "run's ranks, or a rank that failed mid-message); the rank stops.\n",
               g_joined_rank.load(), what.c_str());
  std::_Exit(1);
}

}  // namespace

std::unique_ptr<Communicator> connect_gloo(const RankInfo& info) {
  leave_pid_file(info);
  if (const std::string problem = address_problem(info.host); !problem.empty())
    throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                    " cannot listen: " + problem + " (XRUN_RANK_HOST, or this host's name)");
  const std::string secret = info.secret.empty() ? read_rank_secret(info.rendezvous) : info.secret;
  g_joined_rank = info.rank;
  std::set_terminate(gloo_thread_failed);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = info.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    TimedFileStore store(info.rendezvous, info.timeout);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(info.rank, info.size);
    ctx->setTimeout(info.timeout);
    ctx->connectFullMesh(store, device);
    verify_peers(*ctx, info, secret);
    return std::make_unique<GlooCommunicator>(info, std::move(ctx));
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {  // gloo::Exception, or an EnforceNotMet
    std::string gone = lost_ranks(info);
    throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                    " could not join the others through " + info.rendezvous + ": " +
                    (gone.empty() ? "" : gone + "; ") + "gloo: " + e.what());
  }
}

}  // namespace xrun::dist
