// runner/rank_launch.cpp: see rank_launch.h.
#include "runner/rank_launch.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/distributed/communicator.h"

namespace xrun::cli {

int planned_ranks(const RunSpec& spec) { return spec.config.at("train").at("ranks").get<int>(); }

bool trained_by_ranks(const RunSpec& spec) {
  return planned_ranks(spec) > 1 ||
         spec.config.at("distributed").value("backend", "auto") != "auto";
}

std::vector<ChildRun> rank_children(const RankLaunch& launch, int run_index) {
  std::vector<ChildRun> out;
  for (int r = 0; r < launch.ranks; ++r) {
    ChildRun c;
    c.index = run_index;
    c.argv = launch.argv;
    c.pin = launch.pin;
    c.label = "rank " + std::to_string(r);
    c.env = {{"XRUN_RANK", std::to_string(r)},
             {"XRUN_WORLD_SIZE", std::to_string(launch.ranks)},
             {"XRUN_RENDEZVOUS", launch.rendezvous},
             {"XRUN_RANK_HOST", "127.0.0.1"},  // one machine: loopback
             {"XRUN_RANK_TIMEOUT_S", std::to_string(launch.timeout_s)}};
    out.push_back(std::move(c));
  }
  return out;
}

RendezvousDir::RendezvousDir(const std::string& beside) {
  namespace fs = std::filesystem;
  fs::path folder = fs::path(beside).parent_path();
  if (folder.empty()) folder = ".";
  std::string pattern = (folder / ".xrun-ranks-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    error_ = pattern + ": " + std::strerror(errno);
    return;
  }
  std::error_code ec;
  path_ = fs::absolute(pattern, ec).string();
  if (ec) path_ = pattern;
  try {
    dist::write_rank_secret(path_);  // before any rank starts: what the ranks prove they hold
  } catch (const std::exception& e) {
    error_ = e.what();
  }
}

RendezvousDir::~RendezvousDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace xrun::cli
