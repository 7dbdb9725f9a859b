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
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "engine/distributed/communicator.h"

namespace xrun::dist {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, int fallback, int least) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < least || n > 1 << 20)
    throw std::invalid_argument(std::string(name) + "=" + v + ": expected a whole number >= " +
                                std::to_string(least));
  return static_cast<int>(n);
}

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::string pid_file(const RankInfo& info, int rank) {
  return (std::filesystem::path(info.rendezvous) / ("rank-" + std::to_string(rank) + ".pid"))
      .string();
}

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
    } catch (const gloo::Exception& e) {
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

RankInfo rank_info_from_environment() {
  RankInfo info;
  if (!std::getenv("XRUN_RANK")) return info;
  info.size = env_int("XRUN_WORLD_SIZE", 1, 1);
  info.rank = env_int("XRUN_RANK", 0, 0);
  if (info.rank >= info.size)
    throw std::invalid_argument("XRUN_RANK=" + std::to_string(info.rank) +
                                " is not below XRUN_WORLD_SIZE=" + std::to_string(info.size));
  info.rendezvous = env_or("XRUN_RENDEZVOUS", "");
  if (info.size > 1 && info.rendezvous.empty())
    throw std::invalid_argument("XRUN_RENDEZVOUS is not set: the ranks need a directory to meet in");
  info.host = env_or("XRUN_RANK_HOST", info.host);
  info.timeout = std::chrono::seconds(env_int("XRUN_RANK_TIMEOUT_S", 120, 1));
  return info;
}

std::unique_ptr<Communicator> connect_gloo(const RankInfo& info) {
  {
    std::ofstream pid(pid_file(info, info.rank));
    pid << this_host() << " " << getpid() << "\n";
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = info.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(info.rendezvous);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(info.rank, info.size);
    ctx->setTimeout(info.timeout);
    ctx->connectFullMesh(store, device);
    return std::make_unique<GlooCommunicator>(info, std::move(ctx));
  } catch (const gloo::Exception& e) {
    std::string gone = lost_ranks(info);
    throw CommError("rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
                    " could not join the others through " + info.rendezvous + ": " +
                    (gone.empty() ? "" : gone + "; ") + "gloo: " + e.what());
  }
}

namespace {

// Whether process `pid` has ended: gone, or a zombie its parent has not yet
// reaped (what a killed rank is when its connection reset arrives).
bool has_ended(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

std::string lost_ranks(const RankInfo& info) {
  const std::string host = this_host();
  std::vector<std::pair<int, long>> peers;  // (rank, pid) of the ranks on this host
  for (int r = 0; r < info.size; ++r) {
    if (r == info.rank) continue;
    std::ifstream in(pid_file(info, r));
    std::string their_host;
    long pid = 0;
    if (in >> their_host >> pid && their_host == host && pid > 0) peers.emplace_back(r, pid);
  }
  // A rank's connection can reset while its process is still being torn
  // down: look again for up to a second.
  std::string out;
  for (int attempt = 0; attempt < 20 && out.empty(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const auto& [r, pid] : peers)
      if (has_ended(pid))
        out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (pid " +
               std::to_string(pid) + ") has ended";
  }
  return out;
}

}  // namespace xrun::dist
