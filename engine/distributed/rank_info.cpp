// engine/distributed/rank_info.cpp: where a rank finds the others (the
// XRUN_* variables the launcher sets), and the pid files every backend
// leaves in the rendezvous directory so a failed collective can name the
// ranks that are gone.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// The first IPv4 address of an interface that is up and not loopback, or "".
std::string interface_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (const ifaddrs* a = list; a && out.empty(); a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && (a->ifa_flags & IFF_UP) &&
        !(a->ifa_flags & IFF_LOOPBACK)) {
      char text[INET_ADDRSTRLEN] = {};
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) out = text;
    }
  freeifaddrs(list);
  return out;
}

// What a Slurm rank listens on: this host's name where it resolves (the
// others may be on other nodes), else this host's first interface address
// (a root or container without the name in /etc/hosts), else loopback.
std::string slurm_listen_address() {
  const std::string name = this_host();
  if (!name.empty() && address_problem(name).empty()) return name;
  const std::string ip = interface_address();
  return ip.empty() ? "127.0.0.1" : ip;
}

}  // namespace

std::string address_problem(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found) freeaddrinfo(found);
  if (rc == 0) return "";
  return "'" + host + "' does not resolve to an address (" + gai_strerror(rc) + ")";
}

RankInfo rank_info_from_environment() {
  RankInfo info;
  const std::string from = env_or("XRUN_RANKS_FROM", "");
  if (!from.empty() && from != "slurm")
    throw std::invalid_argument("XRUN_RANKS_FROM=" + from + ": expected \"slurm\"");
  const bool slurm = from == "slurm" && !std::getenv("XRUN_RANK");
  if (!std::getenv("XRUN_RANK") && !slurm) return info;
  const char* rank_var = slurm ? "SLURM_PROCID" : "XRUN_RANK";
  const char* size_var = slurm ? "SLURM_NTASKS" : "XRUN_WORLD_SIZE";
  if (slurm && (!std::getenv(rank_var) || !std::getenv(size_var)))
    throw std::invalid_argument(
        "XRUN_RANKS_FROM=slurm but SLURM_PROCID or SLURM_NTASKS is not set: start the ranks "
        "with srun inside the job");
  info.launched = true;
  info.size = env_int(size_var, 1, 1);
  info.rank = env_int(rank_var, 0, 0);
  if (info.rank >= info.size)
    throw std::invalid_argument(std::string(rank_var) + "=" + std::to_string(info.rank) +
                                " is not below " + size_var + "=" + std::to_string(info.size));
  info.rendezvous = env_or("XRUN_RENDEZVOUS", "");
  if (info.size > 1 && info.rendezvous.empty())
    throw std::invalid_argument("XRUN_RENDEZVOUS is not set: the ranks need a directory to meet in");
  info.host = env_or("XRUN_RANK_HOST", slurm ? slurm_listen_address() : info.host);
  info.timeout_given = std::getenv("XRUN_RANK_TIMEOUT_S") != nullptr;
  info.timeout = std::chrono::seconds(env_int("XRUN_RANK_TIMEOUT_S", 120, 1));
  return info;
}

void Communicator::all_reduce_sum_device(float*, size_t, void*) {
  throw CommError(backend() + " sums host memory only; device memory needs NCCL");
}
void Communicator::all_reduce_sum_device_async(float* data, size_t n, void* stream) {
  all_reduce_sum_device(data, n, stream);
}
double Communicator::wait_device(void*) { return 0; }

std::string backend_for(const std::string& setting, bool gpu) {
  if (setting == "auto") return gpu ? "nccl" : "gloo";
  return setting;
}

std::unique_ptr<Communicator> connect(const RankInfo& info, const std::string& setting, bool gpu,
                                      int device) {
  const std::string b = backend_for(setting, gpu);
  if (b == "nccl") return connect_nccl(info, device);
  if (b == "gloo") return connect_gloo(info);
  throw CommError("unknown distributed.backend '" + setting + "'");
}

void leave_pid_file(const RankInfo& info) {
  if (info.rendezvous.empty()) return;
  std::ofstream pid(pid_file(info, info.rank));
  pid << this_host() << " " << getpid() << "\n";
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
