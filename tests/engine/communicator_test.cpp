// tests/engine/communicator_test.cpp: the collectives of data-parallel
// training (engine/distributed/) over real gloo, two ranks as two threads of
// this process meeting in a scratch folder: sums of floats and doubles on
// every rank, text and rank records gathered in rank order, a rank that
// never joins failing the other after the timeout, the environment a rank
// is launched with, and nccl-tests' bus bandwidth arithmetic. Who may join:
// a process that speaks gloo but lacks the run's secret is refused before
// any data, the secret file's own checks, and a stranger's malformed message
// on a rank's port ends that rank with exit code 1, not an abort.
#include "catch2_compat.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "engine/backend.h"
#include "engine/device/nccl_api.h"
#include "engine/distributed/allreduce_probe.h"
#include "engine/distributed/communicator.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/rank_stats.h"
#include "skip.h"
#include "test_util.h"

using namespace xrun;
using namespace xrun::dist;
using Catch::Contains;

namespace {

RankInfo info(int rank, int size, const std::string& dir, int timeout_s = 20) {
  RankInfo i;
  i.rank = rank;
  i.size = size;
  i.rendezvous = dir;
  i.timeout = std::chrono::seconds(timeout_s);
  return i;
}

// Runs `body(comm)` on ranks 0 and 1 at once; rethrows a rank's exception.
template <typename Body>
void on_two_ranks(const std::string& dir, Body body) {
  write_rank_secret(dir);
  std::exception_ptr failed[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      try {
        std::unique_ptr<Communicator> comm = connect_gloo(info(r, 2, dir));
        body(*comm);
      } catch (...) {
        failed[r] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
}

}  // namespace

TEST_CASE("gloo: sums, gathers and a barrier between two ranks", "[distributed][gloo]") {
  xrun_test::ScratchDir dir;
  std::vector<float> sums[2];
  std::vector<double> dsums[2];
  std::vector<std::string> texts[2];
  std::vector<RankRecord> records[2];
  on_two_ranks(dir.str(), [&](Communicator& comm) {
    const int r = comm.rank();
    CHECK(comm.size() == 2);
    CHECK(comm.backend() == "gloo");
    // 3 million floats: more than one of gloo's segments.
    std::vector<float> v(3'000'000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * (r + 1) * 0.25f;
    comm.all_reduce_sum(v.data(), v.size());
    sums[r] = std::move(v);
    std::vector<double> d = {1.0 + r, 1e300 * r, -0.5};
    comm.all_reduce_sum(d.data(), d.size());
    dsums[r] = d;
    texts[r] = all_gather_text(comm, r == 0 ? "node-a" : std::string(300, 'x'), 256);
    RankRecord mine;
    mine.host = "host-" + std::to_string(r);
    mine.device = "cpu (cores " + std::to_string(r) + ")";
    mine.step_ms_median = 10.0 + r;
    mine.allreduce_ms = 2.5 * (r + 1);
    mine.bytes_reduced = 4e6;
    mine.bus_bytes_per_s = r == 0 ? 1.5e9 : NAN;
    records[r] = gather_rank_records(comm, mine);
    comm.barrier();
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(sums[r].size() == 3'000'000);
    size_t wrong = 0;  // x/4 * 1 + x/4 * 2, exact in fp32 for these values
    for (size_t i = 0; i < sums[r].size(); ++i)
      wrong += sums[r][i] != static_cast<float>(i % 1000) * 0.75f;
    CHECK(wrong == 0);
    CHECK(dsums[r] == std::vector<double>{3.0, 1e300, -1.0});
    REQUIRE(texts[r].size() == 2);
    CHECK(texts[r][0] == "node-a");
    CHECK(texts[r][1] == std::string(256, 'x'));  // cut at max_bytes
    REQUIRE(records[r].size() == 2);
    for (int q = 0; q < 2; ++q) {
      CHECK(records[r][q].rank == q);
      CHECK(records[r][q].host == "host-" + std::to_string(q));
      CHECK(records[r][q].step_ms_median == 10.0 + q);
      CHECK(records[r][q].allreduce_ms == 2.5 * (q + 1));
    }
    CHECK(records[r][0].bus_bytes_per_s == 1.5e9);
    CHECK(std::isnan(records[r][1].bus_bytes_per_s));  // NaN stays in its own row
  }
}

TEST_CASE("gloo: a rank that never joins fails the other after the timeout",
          "[distributed][gloo]") {
  xrun_test::ScratchDir dir;
  write_rank_secret(dir.str());
  const auto start = std::chrono::steady_clock::now();
  try {
    connect_gloo(info(0, 2, dir.str(), 1));
    FAIL("joined without rank 1");
  } catch (const CommError& e) {
    CHECK_THAT(e.what(), Contains("rank 0 of 2 could not join") && Contains(dir.str()));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took >= 0.9);
  CHECK(took < 15);
}

TEST_CASE("gloo: a process that speaks gloo but lacks the run's secret cannot take a rank's place",
          "[distributed][gloo][security]") {
  // The strongest impostor: a real gloo rank 1, meeting rank 0 through the
  // same rendezvous, with every message right but another secret.
  xrun_test::ScratchDir dir;
  write_rank_secret(dir.str());
  std::string errors[2];
  bool joined[2] = {false, false};
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      RankInfo i = info(r, 2, dir.str(), 20);
      if (r == 1) i.secret = std::string(64, 'a');  // not the run's
      try {
        std::unique_ptr<Communicator> comm = connect_gloo(i);
        joined[r] = true;
        float x = 1.0f;
        comm->all_reduce_sum(&x, 1);
      } catch (const CommError& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  CHECK_FALSE(joined[0]);
  CHECK_FALSE(joined[1]);
  CHECK_THAT(errors[0], Contains("rank 0 of 2 refused to join: the process connected as rank 1 did "
                                 "not prove it holds this run's secret") &&
                            Contains(dir.str() + "/secret") &&
                            Contains("before any data was exchanged"));
  // The impostor cannot tell the real rank's proof from a wrong one either.
  CHECK_THAT(errors[1], Contains("connected as rank 0 did not prove"));
}

TEST_CASE("ranks: the run's secret is written once, private, and refused when anyone could read it",
          "[distributed][security]") {
  xrun_test::ScratchDir dir;
  CHECK_THROWS_WITH(read_rank_secret(dir.str()),
                    Contains("cannot read the ranks' secret " + dir.str() + "/secret") &&
                        Contains("xrun submit"));
  write_rank_secret(dir.str());
  struct stat st {};
  REQUIRE(::stat((dir.str() + "/secret").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const std::string secret = read_rank_secret(dir.str());
  CHECK(secret.size() == 64);
  CHECK(secret.find_first_not_of("0123456789abcdef") == std::string::npos);
  // Never replaced: a second write fails rather than change a secret ranks
  // may already have read.
  CHECK_THROWS_WITH(write_rank_secret(dir.str()), Contains("cannot create the ranks' secret"));
  // Two folders, two secrets.
  xrun_test::ScratchDir other;
  write_rank_secret(other.str());
  CHECK(read_rank_secret(other.str()) != secret);

  ::chmod((dir.str() + "/secret").c_str(), 0644);
  CHECK_THROWS_WITH(read_rank_secret(dir.str()),
                    Contains("can be read or written by others (mode 0644; it must be 0600)"));
  ::chmod((dir.str() + "/secret").c_str(), 0600);
  xrun_test::write_bytes(dir.str() + "/secret", std::string("abc\n"));
  CHECK_THROWS_WITH(read_rank_secret(dir.str()), Contains("holds 3 characters"));
  std::filesystem::remove(dir.str() + "/secret");
  REQUIRE(::mkfifo((dir.str() + "/secret").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_rank_secret(dir.str()), Contains("is not a regular file"));  // no hang
  // The proofs: bound to the secret, the direction and the nonce.
  const std::string nonce(32, 'n');
  CHECK(same_proof(rank_proof(secret, 1, 0, nonce), rank_proof(secret, 1, 0, nonce)));
  CHECK_FALSE(same_proof(rank_proof(secret, 1, 0, nonce), rank_proof(secret, 0, 1, nonce)));
  CHECK_FALSE(same_proof(rank_proof(secret, 1, 0, nonce), rank_proof(secret, 1, 0, "m" + nonce.substr(1))));
  CHECK_FALSE(same_proof(rank_proof(secret, 1, 0, nonce), rank_proof(secret + "0", 1, 0, nonce)));
}

namespace {

// The TCP ports process `pid` listens on (its sockets in /proc/net/tcp in
// state LISTEN): what a stranger watching the machine finds.
std::vector<int> listening_ports(pid_t pid) {
  std::vector<std::string> inodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.push_back(target.substr(8, target.size() - 9));
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "0A") continue;
    for (const std::string& i : inodes)
      if (i == inode) ports.push_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

}  // namespace

TEST_CASE("gloo: a stranger's malformed message on a rank's port ends the rank with exit 1, no abort",
          "[distributed][gloo][security]") {
  // Rank 0 of 2 in a child process; this process plays the stranger who
  // connects to its port first and sends one gloo header (opcode 1, a slot
  // nobody uses): Debian's gloo throws on its own thread, which used to
  // abort the rank (SIGABRT).
  xrun_test::ScratchDir dir;
  write_rank_secret(dir.str());
  const std::string log = dir.str() + "/rank0.log";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    try {
      connect_gloo(info(0, 2, dir.str(), 5));
      std::fprintf(stderr, "joined\n");
      std::_Exit(3);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "CommError: %s\n", e.what());
      std::_Exit(2);
    }
  }
  std::vector<int> ports;
  for (int i = 0; i < 400 && ports.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    ports = listening_ports(child);
  }
  REQUIRE(ports.size() == 1);
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(ports[0]));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(sock, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  // nbytes, opcode, slot, offset, length, roffset, then 8 bytes of payload.
  const uint64_t message[7] = {56, 1, 0xdeadbeef, 0, 8, 0, 0};
  REQUIRE(::send(sock, message, sizeof message, 0) == 56);
  int status = 0;
  for (int i = 0; i < 1200; ++i) {  // at most 60 s
    if (::waitpid(child, &status, WNOHANG) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (i == 1199) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL("rank 0 still waits 60 s after the stranger's message");
    }
  }
  ::close(sock);
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(said);
  REQUIRE(WIFEXITED(status));  // not killed by SIGABRT
  if (WEXITSTATUS(status) == 1) {
    // Debian 12's gloo (a listening socket per pair) read the header on its
    // own thread and threw: the rank says so and stops.
    CHECK_THAT(said, Contains("xrun: rank 0: the collectives' connection thread (gloo) failed") &&
                         Contains("a process that is not one of the run's ranks"));
  } else {
    // A gloo that reads a connection's pair number first (one listening
    // socket per device) never took the stranger as a pair: the join failed
    // with a CommError after the timeout.
    CHECK(WEXITSTATUS(status) == 2);
    CHECK_THAT(said, Contains("CommError: rank 0 of 2"));
  }
}

TEST_CASE("gloo: the rank's timeout governs the join, not gloo's 30 s default", "[distributed][gloo]") {
  // Rank 0 starts 33 s after rank 1; the timeout is 60 s (gloo's FileStore
  // made rank 1 give up on rank 0's address after 30 s whatever the
  // timeout: "Wait timeout for key(s): rank_0").
  xrun_test::ScratchDir dir;
  write_rank_secret(dir.str());
  std::exception_ptr failed[2];
  float sums[2] = {1.0f, 2.0f};
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      if (r == 0) std::this_thread::sleep_for(std::chrono::seconds(33));
      try {
        std::unique_ptr<Communicator> comm = connect_gloo(info(r, 2, dir.str(), 60));
        comm->all_reduce_sum(&sums[r], 1);
      } catch (...) {
        failed[r] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  CHECK(sums[0] == 3.0f);
  CHECK(sums[1] == 3.0f);
}

TEST_CASE("ranks: the environment a launched rank reads", "[distributed]") {
  unsetenv("XRUN_RANK");
  CHECK(rank_info_from_environment().size == 1);  // not a rank: one process
  setenv("XRUN_RANK", "1", 1);
  setenv("XRUN_WORLD_SIZE", "4", 1);
  setenv("XRUN_RENDEZVOUS", "/shared/meet", 1);
  setenv("XRUN_RANK_HOST", "node-7", 1);
  setenv("XRUN_RANK_TIMEOUT_S", "30", 1);
  RankInfo i = rank_info_from_environment();
  CHECK(i.rank == 1);
  CHECK(i.size == 4);
  CHECK(i.rendezvous == "/shared/meet");
  CHECK(i.host == "node-7");
  CHECK(i.timeout == std::chrono::seconds(30));
  setenv("XRUN_RANK", "4", 1);
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("not below XRUN_WORLD_SIZE=4"));
  setenv("XRUN_RANK", "one", 1);
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("XRUN_RANK=one"));
  setenv("XRUN_RANK", "0", 1);
  unsetenv("XRUN_RENDEZVOUS");
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("XRUN_RENDEZVOUS is not set"));
  for (const char* v : {"XRUN_RANK", "XRUN_WORLD_SIZE", "XRUN_RANK_HOST", "XRUN_RANK_TIMEOUT_S"})
    unsetenv(v);
}

TEST_CASE("ranks: the environment a Slurm task reads (XRUN_RANKS_FROM=slurm)", "[distributed]") {
  // What xrun submit's batch script sets before srun: the rank and count
  // from Slurm, this node's name to listen on, the run's own timeout.
  unsetenv("XRUN_RANK");
  unsetenv("XRUN_RANK_HOST");
  unsetenv("XRUN_RANK_TIMEOUT_S");
  setenv("XRUN_RANKS_FROM", "slurm", 1);
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("XRUN_RENDEZVOUS", "/shared/results/rendezvous-7_0", 1);
  RankInfo i = rank_info_from_environment();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  CHECK(i.launched);
  CHECK(i.rank == 1);
  CHECK(i.size == 2);
  // This host's name where it resolves, else an address of this host (a
  // clean root or container without the name in /etc/hosts).
  if (address_problem(host).empty())
    CHECK(i.host == host);
  else
    CHECK(address_problem(i.host).empty());
  CHECK(i.rendezvous == "/shared/results/rendezvous-7_0");
  setenv("XRUN_RANK_HOST", "node-7", 1);  // said outright
  CHECK(rank_info_from_environment().host == "node-7");
  unsetenv("XRUN_RANK_HOST");
  CHECK_FALSE(i.timeout_given);  // the run's distributed.timeout_s then
  setenv("SLURM_PROCID", "2", 1);
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("SLURM_PROCID=2 is not below SLURM_NTASKS=2"));
  unsetenv("SLURM_NTASKS");
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("start the ranks with srun"));
  setenv("XRUN_RANKS_FROM", "mpi", 1);
  CHECK_THROWS_WITH(rank_info_from_environment(), Contains("XRUN_RANKS_FROM=mpi"));
  for (const char* v : {"XRUN_RANKS_FROM", "SLURM_PROCID", "XRUN_RENDEZVOUS"}) unsetenv(v);
  CHECK_FALSE(rank_info_from_environment().launched);
}

TEST_CASE("gloo: an address that does not resolve is a CommError naming it, not a crash",
          "[distributed][gloo]") {
  // Debian's gloo dereferences a failed lookup (SIGSEGV in CreateDeviceAttr,
  // seen with a clean root's unresolvable host name): checked before.
  xrun_test::ScratchDir dir;
  RankInfo info;
  info.size = 2;
  info.rendezvous = dir.str();
  info.host = "no-such-host.invalid";
  info.timeout = std::chrono::seconds(1);
  CHECK_THROWS_WITH(connect_gloo(info),
                    Contains("rank 0 of 2 cannot listen: 'no-such-host.invalid' does not resolve"));
  CHECK(address_problem("127.0.0.1").empty());
  CHECK_FALSE(address_problem("no-such-host.invalid").empty());
}

TEST_CASE("ranks: bus bandwidth as nccl-tests defines it", "[distributed]") {
  // 100 MB in 0.1 s over 4 ranks: algorithm bandwidth 1 GB/s, bus 2 x 3/4 of it.
  CHECK(allreduce_bus_bandwidth(100e6, 0.1, 4) == Approx(1.5e9));
  CHECK(allreduce_bus_bandwidth(100e6, 0.1, 2) == Approx(1e9));
  CHECK(allreduce_bus_bandwidth(100e6, 0.1, 1) == 0);  // one rank moves nothing
  CHECK(std::isnan(allreduce_bus_bandwidth(100e6, 0, 2)));
}

namespace {

// A communicator that records each all-reduce's range (relative to `base`)
// instead of summing; throws on call `fail_at` (1-based) when set.
class RecordingComm final : public Communicator {
 public:
  explicit RecordingComm(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "recording"; }
  void all_reduce_sum(float* data, size_t n) override {
    std::lock_guard<std::mutex> lock(mu);
    if (++calls == fail_at) throw CommError("rank 1 (pid 42) has ended");
    ranges.emplace_back(static_cast<size_t>(data - base_), static_cast<size_t>(data - base_) + n);
  }
  void all_reduce_sum(double*, size_t) override {}
  void barrier() override {}
  // Device mode (NCCL's place): each queued sum recorded with the stream it
  // follows, in the order `events` shows beside the folds; wait_device
  // reports 1.5 ms a sum.
  bool sums_device_memory() const override { return true; }
  void all_reduce_sum_device_async(float* data, size_t n, void* stream) override {
    const size_t b = static_cast<size_t>(data - base_);
    ranges.emplace_back(b, b + n);
    events.push_back("sum " + std::to_string(b) + ".." + std::to_string(b + n) +
                     (stream == this ? " after the update's stream" : " after ?"));
  }
  double wait_device(void* stream) override {
    events.push_back("wait");
    const double ms = 1.5 * static_cast<double>(ranges.size());
    return ms;
  }
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<std::string> events;
  int calls = 0, fail_at = 0;

 private:
  const float* base_;
};

}  // namespace

TEST_CASE("gradient buckets: cut at the top as gradients complete, the rest sent by finish",
          "[distributed][buckets]") {
  // A region of 100 floats, parameters starting at 2 (padding below goes
  // with it), 10, 30, 60 and 90; buckets of 25 floats (100 bytes).
  std::vector<float> region(100);
  RecordingComm comm(region.data());
  GradientBuckets buckets(comm, region, {60, 2, 90, 30, 10}, 100);
  // The backward pass: last parameter first, then one out of order.
  buckets.ready(90);  // [90, 100): 10 floats complete at the top, below 25
  buckets.ready(30);  // not adjacent to the top yet: nothing
  buckets.ready(60);  // [30, 100) complete: 70 >= 25, one bucket
  buckets.ready(10);  // [10, 30): 20 < 25, waits
  buckets.ready(2);   // [0, 30): 30 >= 25, a second bucket
  CHECK(buckets.finish() >= 0);
  CHECK(comm.ranges == std::vector<std::pair<size_t, size_t>>{{30, 100}, {0, 30}});
  CHECK(buckets.buckets_last_step() == 2);

  // The next step starts afresh; what never filled a bucket goes at finish.
  comm.ranges.clear();
  buckets.ready(90);
  buckets.ready(60);
  buckets.finish();  // [60, 100) is 40 >= 25: sent as soon as 60 was ready
  CHECK(comm.ranges == std::vector<std::pair<size_t, size_t>>{{60, 100}, {0, 60}});
}

TEST_CASE("gradient buckets on a device: the same cuts, each range folded then queued",
          "[distributed][buckets]") {
  // Device memory (NCCL): no thread; each bucket's half-precision
  // gradients are folded in, then its sum is queued after the update's
  // stream, from ready() itself; finish() sends the rest and waits on the
  // device, the time the sums took there as the busy time.
  std::vector<float> region(100);  // stands for device memory: never read
  RecordingComm comm(region.data());
  void* stream = &comm;  // any token: passed through as the stream
  GradientBuckets buckets(
      comm,
      GradientBuckets::DeviceRegion{region.data(), region.size(), stream,
                                    [&](size_t b, size_t e) {
                                      comm.events.push_back("fold " + std::to_string(b) + ".." +
                                                            std::to_string(e));
                                    }},
      {60, 2, 90, 30, 10}, 100);
  buckets.ready(90);
  buckets.ready(30);
  buckets.ready(60);
  CHECK(comm.events == std::vector<std::string>{"fold 30..100", "sum 30..100 after the update's stream"});
  buckets.ready(10);
  buckets.ready(2);
  CHECK(buckets.finish() >= 0);
  CHECK(comm.ranges == std::vector<std::pair<size_t, size_t>>{{30, 100}, {0, 30}});
  CHECK(comm.events.back() == "wait");
  CHECK(comm.events.size() == 5);  // two folds, two sums, one wait
  CHECK(buckets.buckets_last_step() == 2);
  CHECK(buckets.busy_ms_last_step() == 3.0);
  comm.ranges.clear();
  buckets.ready(90);
  buckets.finish();
  CHECK(comm.ranges == std::vector<std::pair<size_t, size_t>>{{0, 100}});  // afresh: all at finish
}

TEST_CASE("gradient buckets: a failed all-reduce reaches finish", "[distributed][buckets]") {
  std::vector<float> region(100);
  RecordingComm comm(region.data());
  comm.fail_at = 1;
  GradientBuckets buckets(comm, region, {0, 50}, 100);
  buckets.ready(50);  // the first bucket: fails on the worker thread
  buckets.ready(0);
  CHECK_THROWS_WITH(buckets.finish(), Contains("rank 1 (pid 42) has ended"));
  CHECK(comm.calls == 1);  // the second bucket was not sent: the ranks no longer agree
}

TEST_CASE("ranks: the exposed all-reduce finding above a fifth of the step",
          "[distributed][findings]") {
  std::vector<RankRecord> ranks = {{0, "a", "cpu (cores 0)", 200, 0, 30, 94371840, 1.3e9},
                                   {1, "a", "cpu (cores 1)", 200, 0, 10, 94371840, 1.4e9}};
  FindingRecord f;
  CHECK_FALSE(exposed_allreduce_finding(ranks, 25, f));  // 15%: hidden enough
  ranks[1].allreduce_ms = 72;  // the slowest rank counts
  REQUIRE(exposed_allreduce_finding(ranks, 0, f));
  CHECK(f.check == "allreduce_exposed");
  CHECK(f.value == Approx(0.36));
  CHECK_THAT(f.message, Contains("rank 1 waited 72.0 ms of its 200.0 ms step (36%)") &&
                            Contains("90.0 MiB per step at 1.40 GB/s bus bandwidth") &&
                            Contains("distributed.bucket_mb = 25 overlaps it"));
  REQUIRE(exposed_allreduce_finding(ranks, 25, f));
  CHECK_THAT(f.message, Contains("buckets of 25.0 MiB"));
  CHECK_FALSE(exposed_allreduce_finding({}, 25, f));
}

TEST_CASE("allreduce probe: sizes from 1 MiB by 4, each timed with nccl-tests' bandwidths",
          "[distributed][gloo]") {
  CHECK(allreduce_sizes(256 << 20) ==
        std::vector<size_t>{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20});
  CHECK(allreduce_sizes(0) == std::vector<size_t>{1 << 20});
  CHECK(allreduce_sizes(5 << 20) == std::vector<size_t>{1 << 20, 4 << 20});
  xrun_test::ScratchDir dir;
  write_rank_secret(dir.str());
  const auto samples = measure_allreduce(3, {1 << 20, 4 << 20}, 2, dir.str());
  REQUIRE(samples.size() == 2);
  for (const AllreduceSample& s : samples) {
    INFO(s.bytes);
    CHECK(s.seconds > 0);
    CHECK(s.algbw == Approx(static_cast<double>(s.bytes) / s.seconds));
    CHECK(s.busbw == Approx(s.algbw * 4.0 / 3.0));  // 2 (n - 1) / n at n = 3
  }
  CHECK(samples[1].bytes == 4 << 20);
}

TEST_CASE("nccl: where no GPU can run, joining is a CommError that says why", "[distributed]") {
  // Without CUDA in the build: "built without NCCL"; with it but no usable
  // GPU: NCCL (or CUDA) says what failed. Never a crash or a hang.
  if (xrun::cuda_engine_available()) XRUN_SKIP("a GPU is here: test_cuda's nccl cases run");
  bool loaded = false;
  const std::string lib = xrun::nccl_library(&loaded);
  INFO(lib);
  CHECK_FALSE(lib.empty());
  try {
    connect_nccl(RankInfo{}, 0);
    FAIL("joined NCCL without a usable GPU");
  } catch (const CommError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).size() > 10);
  }
}
