// tests/config/sweep_and_set_test.cpp: sweep expansion (grid order and
// count, zip), axis order from the file, and --set on keys and on axes.
#include "catch2_compat.h"

#include <set>

#include "helpers.h"

using namespace xrun;
using namespace xrun::test;
using nlohmann::json;

namespace {

// The swept values of each run as "k=v k=v" lines.
std::vector<std::string> swept_lines(const Plan& p) {
  std::vector<std::string> out;
  for (auto& r : p.runs) {
    std::string s;
    for (auto& [k, v] : r.swept) s += (s.empty() ? "" : " ") + k + "=" + v.dump();
    out.push_back(s);
  }
  return out;
}

const char* kGrid = R"(
name = "g"
[train]
device = "cpu"
[sweep]
train.threads = [1, 2]
data.image_size = [32, 64, 96]
train.optimizer.lr = [0.1, 0.01]
)";

}  // namespace

TEST_CASE("no [sweep] is one run", "[config][sweep]") {
  Plan p = plan_text("name = \"one\"\n");
  REQUIRE(p.runs.size() == 1);
  CHECK(p.runs[0].index == 0);
  CHECK(p.runs[0].swept.empty());
  CHECK(p.axes.empty());
  CHECK(p.mode == "grid");
  // Only a mode, or an empty [sweep]: still one run.
  CHECK(plan_text("name = \"one\"\n[sweep]\nmode = \"zip\"\n").runs.size() == 1);
  CHECK(plan_text("name = \"one\"\n[sweep]\n").runs.size() == 1);
}

TEST_CASE("grid: cartesian product, first axis in the file outermost", "[config][sweep]") {
  Plan p = plan_text(kGrid);
  // File order, not name order.
  CHECK(p.axes == std::vector<std::string>{"train.threads", "data.image_size", "train.optimizer.lr"});
  REQUIRE(p.runs.size() == 12);
  auto lines = swept_lines(p);
  CHECK(lines[0] == "train.threads=1 data.image_size=32 train.optimizer.lr=0.1");
  CHECK(lines[1] == "train.threads=1 data.image_size=32 train.optimizer.lr=0.01");
  CHECK(lines[2] == "train.threads=1 data.image_size=64 train.optimizer.lr=0.1");
  CHECK(lines[5] == "train.threads=1 data.image_size=96 train.optimizer.lr=0.01");
  CHECK(lines[6] == "train.threads=2 data.image_size=32 train.optimizer.lr=0.1");
  CHECK(lines[11] == "train.threads=2 data.image_size=96 train.optimizer.lr=0.01");
  for (int i = 0; i < 12; ++i) {
    CHECK(p.runs[i].index == i);
    // The swept value is in the resolved config.
    CHECK(p.runs[i].config["data"]["image_size"] == p.runs[i].swept[1].second);
  }
  // Every run is a different config.
  std::set<std::string> hashes;
  for (auto& r : p.runs) hashes.insert(r.config_hash);
  CHECK(hashes.size() == 12);
}

TEST_CASE("grid axis order follows the file however the axes are written", "[config][sweep]") {
  Plan p = plan_text(R"(
name = "g"
[sweep.train]
seed = [1, 2]
[sweep]
data.limit = [10, 20, 30]
)");
  CHECK(p.axes == std::vector<std::string>{"train.seed", "data.limit"});
  CHECK(swept_lines(p)[1] == "train.seed=1 data.limit=20");
}

TEST_CASE("zip: element-wise", "[config][sweep]") {
  Plan p = plan_text(R"(
name = "z"
[sweep]
mode = "zip"
train.batch_size = [16, 32, "auto"]
train.precision = ["fp32", "fp32", "fp32"]
train.cudnn_benchmark = [false, true, "cached"]
)", gpu_options());
  REQUIRE(p.runs.size() == 3);
  CHECK(p.mode == "zip");
  auto lines = swept_lines(p);
  CHECK(lines[0] == "train.batch_size=16 train.precision=\"fp32\" train.cudnn_benchmark=false");
  CHECK(lines[2] == "train.batch_size=\"auto\" train.precision=\"fp32\" train.cudnn_benchmark=\"cached\"");
  CHECK(p.runs[2].config["train"]["batch_size"] == "auto");
  CHECK(p.runs[2].config["train"]["cudnn_benchmark"] == "cached");
  CHECK(p.runs[1].config["train"]["cudnn_benchmark"] == true);
}

TEST_CASE("set override: on plain keys", "[config][set]") {
  PlanOptions o = cpu_options();
  o.sets = {"train.batch_size=64", "train.optimizer.lr=3e-4", "data.augment=[\"hflip\"]",
            "train.precision=fp32", "store.label=my box", "train.eval = false"};
  // "my box" is not a bare word: it must be quoted.
  auto e = error_of("name = \"s\"\n", o);
  CHECK(e.file == "--set");
  CHECK(std::string(e.what()).rfind("--set store.label=my box: cannot read the value", 0) == 0);

  o.sets[4] = "store.label=\"my box\"";
  Plan p = plan_text("name = \"s\"\n[train]\nbatch_size = 8\n", o);
  const json& c = p.runs[0].config;
  CHECK(c["train"]["batch_size"] == 64);  // --set beats the file
  CHECK(c["train"]["optimizer"]["lr"] == 3e-4);
  CHECK(c["data"]["augment"] == json::array({"hflip"}));
  CHECK(c["train"]["precision"] == "fp32");
  CHECK(c["store"]["label"] == "my box");
  CHECK(c["train"]["eval"] == false);
  CHECK(p.notices.empty());
}

TEST_CASE("set override:: bare words are strings, the last --set of a key wins", "[config][set]") {
  PlanOptions o = gpu_options();
  o.sets = {"train.precision=bf16", "train.device=cuda:1", "train.batch_size=auto", "store.path=runs/a.db",
            "train.precision=fp16", "train.cudnn_benchmark=cached"};
  Plan p = plan_text("name = \"s\"\n", o);
  const json& c = p.runs[0].config;
  CHECK(c["train"]["precision"] == "fp16");
  CHECK(c["train"]["device"] == "cuda:1");
  CHECK(c["train"]["batch_size"] == "auto");
  CHECK(c["store"]["path"] == "runs/a.db");
  CHECK(c["train"]["cudnn_benchmark"] == "cached");
}

TEST_CASE("set override: on sweep axes and mode", "[config][set]") {
  PlanOptions o = cpu_options();
  o.sets = {"sweep.train.threads=[1, 2, 4]", "sweep.train.seed=[7, 8, 9]", "sweep.mode=zip"};
  // threads replaced in place, seed appended; image_size and lr resized for zip.
  o.sets.push_back("sweep.data.image_size=[32, 64, 96]");
  o.sets.push_back("sweep.train.optimizer.lr=[0.1, 0.01, 0.001]");
  Plan p = plan_text(kGrid, o);
  CHECK(p.mode == "zip");
  CHECK(p.axes == std::vector<std::string>{"train.threads", "data.image_size", "train.optimizer.lr", "train.seed"});
  REQUIRE(p.runs.size() == 3);
  CHECK(swept_lines(p)[2] == "train.threads=4 data.image_size=96 train.optimizer.lr=0.001 train.seed=9");
}

TEST_CASE("set override: of a swept key drops the axis, with a notice", "[config][set]") {
  PlanOptions o = cpu_options();
  o.sets = {"data.image_size=48"};
  Plan p = plan_text(kGrid, o);
  CHECK(p.axes == std::vector<std::string>{"train.threads", "train.optimizer.lr"});
  REQUIRE(p.runs.size() == 4);
  for (auto& r : p.runs) CHECK(r.config["data"]["image_size"] == 48);
  REQUIRE(p.notices.size() == 1);
  CHECK(p.notices[0] == "--set data.image_size=48 fixes data.image_size, so its sweep axis [32, 64, 96] is dropped");
}

TEST_CASE("bad --set arguments", "[config][set]") {
  struct Case {
    const char* set;
    const char* what;
  } cases[] = {
      {"train.batchsize=64", "--set train.batchsize=64: unknown key 'train.batchsize'; did you mean 'train.batch_size'?"},
      {"train.batch_size=0", "--set train.batch_size=0: expected an integer in [1, 65536], found 0"},
      {"train.batch_size", "--set train.batch_size: expected KEY=VALUE"},
      {"=5", "--set =5: expected KEY=VALUE"},
      {"train.precision=fp8", "--set train.precision=fp8: expected one of \"fp32\", \"tf32\", \"fp16\", \"bf16\", found \"fp8\""},
      {"train.optimizer.lr=x", "--set train.optimizer.lr=x: expected a number > 0, found a string \"x\""},
      {"train.batch_size=[1,", "--set train.batch_size=[1,: cannot read the value as TOML ("},
      {"store.label=<script>", "--set store.label=<script>: cannot read the value as TOML ("},
      {"sweep.train.batch_size=64", "--set sweep.train.batch_size=64: expected a list of values to sweep"},
      {"sweep.train.batch_size=[]", "--set sweep.train.batch_size=[]: expected at least one value to sweep"},
      {"sweep.train.batchsize=[1]", "--set sweep.train.batchsize=[1]: unknown key 'train.batchsize' in [sweep]; did you mean 'train.batch_size'?"},
      {"sweep.mode=random", "--set sweep.mode=random: expected one of \"grid\", \"zip\", found \"random\""},
      {"sweep.store.label=[\"a\"]", "--set sweep.store.label=[\"a\"]: 'store.label' cannot be swept"},
      {"data.mean=[0.5]", "--set data.mean=[0.5]: expected 3 values (one per channel, data.channels = 3), found 1"},
      {"train.precision=fp16", "--set train.precision=fp16: run 0: precision 'fp16' needs a CUDA device"},
      {"train.seed=1\nx = 2", "--set train.seed=1\nx = 2: expected one value after '='"},
  };
  for (auto& c : cases) {
    INFO(c.set);
    PlanOptions o = cpu_options();
    o.sets = {c.set};
    auto e = error_of("name = \"s\"\n", o);
    CHECK(e.file == "--set");
    CHECK(e.line == 0);
    CHECK(std::string(e.what()).rfind(c.what, 0) == 0);
  }
}
