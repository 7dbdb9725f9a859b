// tests/cli/slurm_cluster.h: a real single-node Slurm cluster for the tests,
// started by the test as its own processes and stopped after it: Debian's
// munged (its own key and socket), slurmctld and slurmd (slurm-wlm 22.05)
// with a generated slurm.conf in a scratch folder: one node with this
// machine's cores, select/cons_tres, job completion records in a text
// file, ports chosen free. Clients reach it through SLURM_CONF (env()).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace xrun_test {

class SlurmCluster {
 public:
  // "" when the daemons and clients are installed, else what is missing.
  static std::string missing() {
    std::string out;
    for (const char* tool : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                             "/usr/bin/sbatch", "/usr/bin/squeue", "/usr/bin/sinfo"})
      if (access(tool, X_OK) != 0) out += std::string(out.empty() ? "" : ", ") + tool;
    return out;
  }

  SlurmCluster() {
    const std::string d = dir_.str();
    for (const char* sub : {"state", "spool", "log"}) std::filesystem::create_directories(dir_.file(sub));
    std::string key(1024, '\0');
    std::random_device rd;
    for (char& c : key) c = static_cast<char>(rd());
    write_bytes(dir_.file("munge.key"), key);
    std::filesystem::permissions(dir_.file("munge.key"), std::filesystem::perms::owner_read);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    const int ctld_port = free_port(), slurmd_port = free_port();
    write_bytes(dir_.file("slurm.conf"),
                "ClusterName=xrun-test\n"
                "SlurmctldHost=" + std::string(host) + "(127.0.0.1)\n"
                "SlurmUser=root\n"
                "SlurmctldPort=" + std::to_string(ctld_port) + "\n"
                "SlurmdPort=" + std::to_string(slurmd_port) + "\n"
                "AuthType=auth/munge\nCredType=cred/munge\n"
                "AuthInfo=socket=" + d + "/munge.sock\n"
                "StateSaveLocation=" + d + "/state\nSlurmdSpoolDir=" + d + "/spool\n"
                "SlurmctldPidFile=" + d + "/slurmctld.pid\nSlurmdPidFile=" + d + "/slurmd.pid\n"
                "SlurmctldLogFile=" + d + "/log/slurmctld.log\nSlurmdLogFile=" + d + "/log/slurmd.log\n"
                "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/affinity\nMpiDefault=none\n"
                "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\n"
                "JobCompType=jobcomp/filetxt\nJobCompLoc=" + d + "/jobcomp.txt\n"
                "AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n"
                "MinJobAge=3600\n"
                "NodeName=xrunnode NodeHostname=" + std::string(host) + " NodeAddr=127.0.0.1 CPUs=" +
                    std::to_string(std::thread::hardware_concurrency()) + " State=UNKNOWN\n"
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
    setenv("SLURM_CONF", dir_.file("slurm.conf").c_str(), 1);
    try {
      start();
    } catch (...) {
      stop();  // no destructor runs for a cluster that failed to start
      throw;
    }
  }

  ~SlurmCluster() { stop(); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Waits until no job is queued or running (false after `seconds`).
  bool wait_idle(int seconds) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      const CommandResult r = run_command("squeue -h 2>&1");
      if (r.status == 0 && r.output.empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return false;
  }
  std::string log_dir() const { return dir_.file("log"); }

 private:
  void start() {
    const std::string d = dir_.str();
    spawn({"/usr/sbin/munged", "-F", "--force", "--socket=" + d + "/munge.sock",
           "--key-file=" + d + "/munge.key", "--log-file=" + d + "/log/munged.log",
           "--pid-file=" + d + "/munged.pid", "--seed-file=" + d + "/munged.seed"});
    wait_for([&] { return std::filesystem::exists(d + "/munge.sock"); }, "munged's socket");
    spawn({"/usr/sbin/slurmctld", "-D", "-i", "-f", dir_.file("slurm.conf")});
    spawn({"/usr/sbin/slurmd", "-D", "-N", "xrunnode", "-f", dir_.file("slurm.conf")});
    wait_for([&] {
      const CommandResult r = run_command("sinfo -h -o %T 2>/dev/null");
      return r.status == 0 && r.output.find("idle") != std::string::npos;
    }, "an idle node (" + d + "/log)");
  }
  // The daemons, last started first.
  void stop() {
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) kill(*it, SIGTERM);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
    pids_.clear();
    unsetenv("SLURM_CONF");
  }
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      throw std::runtime_error("no free port");
    }
    close(fd);
    return ntohs(a.sin_port);
  }
  void spawn(const std::vector<std::string>& argv) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string log = dir_.file("log/" + std::filesystem::path(argv[0]).filename().string() + ".out");
      if (!freopen(log.c_str(), "w", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(99);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(98);
    }
    pids_.push_back(pid);
  }
  template <class F>
  void wait_for(F ready, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::string logs;  // what the daemons said, for the failure message
    for (const char* daemon : {"slurmd.out", "slurmctld.out", "munged.out"}) {
      const CommandResult tail = run_command("tail -n 4 " + shell_quote(dir_.file("log/" + std::string(daemon))));
      logs += std::string("\n") + daemon + ":\n" + tail.output;
    }
    throw std::runtime_error("the test cluster did not start: no " + what + logs);
  }

  ScratchDir dir_;
  std::vector<pid_t> pids_;
};

}  // namespace xrun_test
