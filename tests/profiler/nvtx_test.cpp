// tests/profiler/nvtx_test.cpp: what Nsight Systems would see of a real run,
// without Nsight: xrun trains a small experiment on the CPU with an NVTX tool
// loaded through NVTX_INJECTION64_PATH (tests/profiler/recorder), and the
// ranges it recorded are checked: the "xrun" domain, registered names, the
// nesting run > epoch > step > phase > layer, step payloads in order, eval
// inside its epoch, and named loader threads.
#include "catch2_compat.h"

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "skip.h"
#include "test_util.h"

using namespace xrun_test;

namespace {

struct Range {
  std::string name;
  long long payload = -1;
  std::vector<Range> children;
};

struct Trace {
  std::string domain_name;
  Range root;  // "(root)": top-level ranges are its children
  std::vector<std::string> threads;
  int unbalanced = 0;
};

Trace parse(const std::string& log) {
  Trace t;
  std::map<long, std::string> domains, strings;
  std::vector<Range*> stack = {&t.root};
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string kind;
    l >> kind;
    if (kind == "domain" || kind == "string") {
      long id;
      std::string text;
      l >> id;
      std::getline(l >> std::ws, text);
      (kind == "domain" ? domains : strings)[id] = text;
      if (kind == "domain") t.domain_name = text;
    } else if (kind == "push") {
      long domain, string;
      std::string payload;
      l >> domain >> string >> payload;
      Range r;
      r.name = strings.count(string) ? strings[string] : "?";
      if (payload != "-") r.payload = std::stoll(payload);
      stack.back()->children.push_back(r);
      stack.push_back(&stack.back()->children.back());
    } else if (kind == "pop") {
      if (stack.size() > 1) stack.pop_back(); else ++t.unbalanced;
    } else if (kind == "thread") {
      long tid;
      std::string name;
      l >> tid;
      std::getline(l >> std::ws, name);
      t.threads.push_back(name);
    }
  }
  t.unbalanced += static_cast<int>(stack.size()) - 1;
  return t;
}

std::vector<std::string> names(const Range& r) {
  std::vector<std::string> out;
  for (const Range& c : r.children) out.push_back(c.name);
  return out;
}

}  // namespace

TEST_CASE("NVTX: a CPU run's ranges as a profiler sees them", "[profiler][nvtx]") {
#ifndef XRUN_NVTX_RECORDER
  XRUN_SKIP("built without NVTX headers");
#else
  ScratchDir dir;
  write_bytes(dir.file("nvtx.toml"), R"(name = "nvtx"
[model]
arch = "resnet18"
[data]
source = "synthetic"
image_size = 16
samples = 64
test_samples = 32
workers = 2
[train]
device = "cpu"
batch_size = 16
epochs = 2
threads = 1
[measure]
warmup_steps = 1
[profile]
layers = true
)");
  const std::string log = dir.file("nvtx.log");
  const auto r = run_command("cd " + shell_quote(dir.str()) + " && NVTX_INJECTION64_PATH=" +
                             shell_quote(XRUN_NVTX_RECORDER) + " XRUN_NVTX_LOG=" + shell_quote(log) +
                             " " + shell_quote(xrun_binary()) + " run nvtx.toml --db r.db");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const Trace t = parse(read_bytes(log));
  CHECK(t.domain_name == "xrun");
  CHECK(t.unbalanced == 0);

  REQUIRE(names(t.root) == std::vector<std::string>{"run"});
  const Range& run = t.root.children[0];
  // Two epochs of 4 steps; each epoch ends with its evaluation.
  REQUIRE(names(run) == std::vector<std::string>{"epoch", "epoch"});
  long long expected_step = 0;
  for (int e = 0; e < 2; ++e) {
    const Range& epoch = run.children[e];
    CHECK(epoch.payload == e);
    REQUIRE(epoch.children.size() == 5);
    for (int s = 0; s < 4; ++s) {
      const Range& step = epoch.children[s];
      CHECK(step.name == "step");
      CHECK(step.payload == expected_step++);
      CHECK(names(step) == std::vector<std::string>{"data_wait", "h2d", "forward", "backward",
                                                    "optimizer"});
      // profile.layers: each layer a range inside its pass, in model order.
      const auto fwd = names(step.children[2]);
      REQUIRE(fwd.size() > 10);
      CHECK(fwd.front() == "conv1");
      CHECK(fwd[1] == "bn1");
      CHECK(fwd[2] == "maxpool");
      CHECK(fwd.back() == "fc");
      const auto bwd = names(step.children[3]);
      CHECK(bwd.front() == "fc");
      CHECK(bwd.back() == "conv1");
    }
    CHECK(epoch.children[4].name == "eval");
  }
  int loaders = 0;
  for (const std::string& n : t.threads) loaders += n.rfind("xrun loader ", 0) == 0;
  CHECK(loaders == 2);
#endif
}

TEST_CASE("NVTX: profile.nvtx = false emits nothing", "[profiler][nvtx]") {
#ifndef XRUN_NVTX_RECORDER
  XRUN_SKIP("built without NVTX headers");
#else
  ScratchDir dir;
  write_bytes(dir.file("quiet.toml"),
              tiny_experiment("quiet", "steps = 2\neval = false", "[profile]\nnvtx = false\n"));
  const std::string log = dir.file("nvtx.log");
  const auto r = run_command("cd " + shell_quote(dir.str()) + " && NVTX_INJECTION64_PATH=" +
                             shell_quote(XRUN_NVTX_RECORDER) + " XRUN_NVTX_LOG=" + shell_quote(log) +
                             " " + shell_quote(xrun_binary()) + " run quiet.toml --db r.db");
  REQUIRE(r.status == 0);
  CHECK(read_bytes(log).find("push") == std::string::npos);
#endif
}
