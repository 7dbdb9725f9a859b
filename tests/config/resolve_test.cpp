// tests/config/resolve_test.cpp: defaults resolution (per data source, per
// optimizer, epochs/steps, device, label) and the mapping to RunConfig.
#include "catch2_compat.h"

#include <algorithm>

#include "engine/data/dataset.h"
#include "helpers.h"
#include "runner/config_schema.h"

using namespace xrun;
using namespace xrun::test;
using nlohmann::json;

namespace {
json resolved(const std::string& toml, PlanOptions o = cpu_options()) { return plan_text(toml, o).runs.at(0).config; }
}  // namespace

TEST_CASE("the resolved config holds every run key of the schema", "[config][defaults]") {
  json c = resolved("name = \"d\"\n");
  for (auto& k : schema::keys()) {
    INFO(k.key);
    if (k.run_setting) {
      std::string path = k.key;
      std::replace(path.begin(), path.end(), '.', '/');
      path.insert(path.begin(), '/');
      REQUIRE(c.contains(json::json_pointer(path)));
    }
  }
  CHECK_FALSE(c.contains("sweep"));
  CHECK(to_run_config(c).name == "d");
}

TEST_CASE("static defaults match the engine's own defaults", "[config][defaults]") {
  // A config with nothing set maps to a RunConfig equal to the engine's
  // default-constructed one, apart from what is resolved per machine/source.
  RunConfig r = to_run_config(resolved("name = \"d\"\n"));
  RunConfig e;
  CHECK(r.model.arch == e.model.arch);
  CHECK(r.model.num_classes == e.model.num_classes);
  CHECK(r.data.source == e.data.source);
  CHECK(r.data.image_size == e.data.image_size);
  CHECK(r.data.channels == e.data.channels);
  CHECK(r.data.workers == e.data.workers);
  CHECK(r.data.prefetch == e.data.prefetch);
  CHECK(r.data.shuffle == e.data.shuffle);
  CHECK(r.data.samples == e.data.samples);
  CHECK(r.data.test_samples == e.data.test_samples);
  CHECK(r.train.batch_size == e.train.batch_size);
  CHECK(r.train.memory_fraction == e.train.memory_fraction);
  CHECK(r.train.precision == e.train.precision);
  CHECK(r.train.cudnn_benchmark == e.train.cudnn_benchmark);
  CHECK(r.train.log_every == e.train.log_every);
  CHECK(r.train.optimizer.lr == e.train.optimizer.lr);
  CHECK(r.train.optimizer.weight_decay == e.train.optimizer.weight_decay);
  CHECK(r.train.optimizer.beta1 == e.train.optimizer.beta1);
  CHECK(r.train.optimizer.beta2 == e.train.optimizer.beta2);
  CHECK(r.train.optimizer.eps == e.train.optimizer.eps);
  CHECK(r.train.schedule.step_size == e.train.schedule.step_size);
  CHECK(r.train.schedule.gamma == e.train.schedule.gamma);
  CHECK(r.measure.warmup_steps == e.measure.warmup_steps);
  CHECK(r.profile.nvtx == e.profile.nvtx);
  CHECK(r.profile.cupti == e.profile.cupti);
  CHECK(r.profile.trace_steps == e.profile.trace_steps);
}

TEST_CASE("data defaults come from the source", "[config][defaults]") {
  SECTION("idx: Fashion-MNIST") {
    json c = resolved("name = \"d\"\n[data]\nsource = \"idx\"\n");
    CHECK(c["data"]["channels"] == 1);
    CHECK(c["data"]["image_size"] == 28);
    CHECK(c["data"]["num_classes"] == 10);
    CHECK(c["model"]["num_classes"] == 10);
    CHECK(c["data"]["path"] == "/usr/share/datasets/fashion-mnist");
    // Fashion-MNIST statistics, as their shortest decimal text (not 0.28600001...).
    CHECK(c["data"]["mean"] == json::array({0.286}));
    CHECK(c["data"]["std"] == json::array({0.353}));
  }
  SECTION("cifar10") {
    json c = resolved("name = \"d\"\n[data]\nsource = \"cifar10\"\n");
    CHECK(c["data"]["channels"] == 3);
    CHECK(c["data"]["image_size"] == 32);
    CHECK(c["data"]["path"] == "data/cifar-10-batches-bin");
    CHECK(c["data"]["mean"] == json::array({0.4914, 0.4822, 0.4465}));
    CHECK(c["data"]["std"] == json::array({0.247, 0.2435, 0.2616}));
  }
  SECTION("synthetic: num_classes flows to the model") {
    json c = resolved("name = \"d\"\n[data]\nnum_classes = 1000\nimage_size = 224\n");
    CHECK(c["data"]["num_classes"] == 1000);
    CHECK(c["model"]["num_classes"] == 1000);
    CHECK(c["data"]["path"] == "");
  }
  SECTION("idx asked for 3 channels replicates the gray statistics") {
    json c = resolved("name = \"d\"\n[data]\nsource = \"idx\"\nchannels = 3\n");
    CHECK(c["data"]["mean"] == json::array({0.286, 0.286, 0.286}));
  }
  SECTION("given values are kept") {
    json c = resolved("name = \"d\"\n[data]\nsource = \"idx\"\nmean = [0.5]\nstd = [0.5]\npath = \"x\"\n"
                      "[model]\nnum_classes = 12\n");
    CHECK(c["data"]["mean"] == json::array({0.5}));
    CHECK(c["data"]["path"] == "x");
    CHECK(c["model"]["num_classes"] == 12);
    CHECK(c["data"]["num_classes"] == 10);
  }
}

TEST_CASE("weight decay defaults per optimizer", "[config][defaults]") {
  CHECK(resolved("name = \"d\"\n")["train"]["optimizer"]["weight_decay"] == 0.01);
  json sgd = resolved("name = \"d\"\n[train.optimizer]\nname = \"sgd\"\nmomentum = 0.9\nnesterov = true\n");
  CHECK(sgd["train"]["optimizer"]["weight_decay"] == 0.0);
  CHECK(sgd["train"]["optimizer"]["weight_decay"].is_number_float());
  CHECK(resolved("name = \"d\"\n[train.optimizer]\nname = \"sgd\"\nweight_decay = 5e-4\n")["train"]["optimizer"]
                ["weight_decay"] == 5e-4);
  // Swept optimizer: each run gets its own default.
  Plan p = plan_text("name = \"d\"\n[sweep]\ntrain.optimizer.name = [\"adamw\", \"sgd\"]\n");
  CHECK(p.runs[0].config["train"]["optimizer"]["weight_decay"] == 0.01);
  CHECK(p.runs[1].config["train"]["optimizer"]["weight_decay"] == 0.0);
}

TEST_CASE("epochs / steps rule", "[config][defaults]") {
  json c = resolved("name = \"d\"\n");
  CHECK(c["train"]["epochs"] == 1);
  CHECK(c["train"]["steps"] == 0);
  c = resolved("name = \"d\"\n[measure]\nwarmup_steps = 3\nmeasure_steps = 10\n");
  CHECK(c["train"]["epochs"] == 0);
  CHECK(c["train"]["steps"] == 13);
  c = resolved("name = \"d\"\n[train]\nepochs = 4\n[measure]\nmeasure_steps = 10\n");
  CHECK(c["train"]["epochs"] == 4);
  CHECK(c["train"]["steps"] == 0);
  c = resolved("name = \"d\"\n[train]\nsteps = 40\n");
  CHECK(c["train"]["epochs"] == 0);
  CHECK(c["train"]["steps"] == 40);
  auto e = error_of("name = \"d\"\n[train]\nsteps = 5\n");  // all 5 are warmup
  CHECK_THAT(e.what(), Catch::Contains("expected more than measure.warmup_steps (5)"));
}

TEST_CASE("device and label resolve per machine", "[config][defaults]") {
  CHECK(resolved("name = \"d\"\n")["train"]["device"] == "cpu");
  CHECK(resolved("name = \"d\"\n", gpu_options())["train"]["device"] == "cuda:0");
  CHECK(resolved("name = \"d\"\n[train]\ndevice = \"cuda\"\n")["train"]["device"] == "cuda:0");
  CHECK(resolved("name = \"d\"\n[train]\ndevice = \"cuda:3\"\n")["train"]["device"] == "cuda:3");
  CHECK(resolved("name = \"d\"\n")["store"]["label"] == "testhost");
  CHECK(resolved("name = \"d\"\n[store]\nlabel = \"4090D-box\"\n")["store"]["label"] == "4090D-box");
  CHECK(resolved("name = \"d\"\n")["store"]["path"] == "xrun.db");
}

TEST_CASE("types are normalised: numbers as doubles, integers as integers", "[config][defaults]") {
  json c = resolved("name = \"d\"\n[train.optimizer]\nlr = 1\nbetas = [0, 0.5]\n[train]\nbatch_size = 512\n");
  CHECK(c["train"]["optimizer"]["lr"].is_number_float());
  CHECK(c["train"]["optimizer"]["betas"][0].is_number_float());
  CHECK(c["train"]["batch_size"].is_number_integer());
  CHECK(c["train"]["cudnn_benchmark"].is_boolean());
}

TEST_CASE("to_run_config maps every field", "[config][run_config]") {
  Plan p = plan_text(R"(
name = "map"
description = "not in RunConfig"
[model]
arch = "resnet18"
num_classes = 20
weights = "init.safetensors"
[data]
source = "synthetic"
path = "/d"
image_size = 40
channels = 2
num_classes = 20
mean = [0.1, 0.2]
std = [0.3, 0.4]
augment = ["hflip"]
shuffle = false
workers = 0
pin_memory = true
prefetch = 3
limit = 100
test_limit = 50
learnable = false
samples = 1000
test_samples = 200
[train]
device = "cuda:1"
batch_size = "auto"
memory_fraction = 0.5
accumulate = 2
steps = 30
precision = "bf16"
cudnn_benchmark = "cached"
cuda_graphs = false
seed = 42
threads = 3
eval = false
checkpoint = "out.safetensors"
resume = true
log_every = 7
[train.optimizer]
name = "sgd"
lr = 0.1
weight_decay = 1e-4
betas = [0.8, 0.99]
eps = 1e-6
momentum = 0.9
nesterov = true
[train.schedule]
name = "step"
warmup_steps = 5
min_lr = 0.001
step_size = 10
gamma = 0.5
[measure]
warmup_steps = 4
measure_steps = 20
[profile]
nvtx = false
cupti = "trace"
layers = true
trace_steps = 2
[store]
path = "r.db"
label = "box"
)");
  RunConfig r = to_run_config(p.runs.at(0).config);
  CHECK(r.name == "map");
  CHECK(r.model.arch == "resnet18");
  CHECK(r.model.num_classes == 20);
  CHECK(r.model.weights == "init.safetensors");
  CHECK(r.data.source == "synthetic");
  CHECK(r.data.path == "/d");
  CHECK(r.data.image_size == 40);
  CHECK(r.data.channels == 2);
  CHECK(r.data.num_classes == 20);
  CHECK(r.data.mean == std::vector<float>{0.1f, 0.2f});
  CHECK(r.data.std == std::vector<float>{0.3f, 0.4f});
  CHECK_FALSE(r.data.random_crop);
  CHECK(r.data.hflip);
  CHECK_FALSE(r.data.shuffle);
  CHECK(r.data.workers == 0);
  CHECK(r.data.pin_memory);
  CHECK(r.data.prefetch == 3);
  CHECK(r.data.limit == 100);
  CHECK(r.data.test_limit == 50);
  CHECK_FALSE(r.data.learnable);
  CHECK(r.data.samples == 1000);
  CHECK(r.data.test_samples == 200);
  CHECK(r.train.device.name() == "cuda:1");
  CHECK(r.train.batch_size == 0);  // "auto"
  CHECK(r.train.memory_fraction == 0.5);
  CHECK(r.train.accumulate == 2);
  CHECK(r.train.epochs == 0);
  CHECK(r.train.steps == 30);
  CHECK(r.train.precision == Precision::bf16);
  CHECK(r.train.cudnn_benchmark == CudnnBenchmark::cached);
  CHECK_FALSE(r.train.cuda_graphs);  // with accumulate = 2 graphs are refused
  CHECK(r.train.seed == 42);
  CHECK(r.train.threads == 3);
  CHECK_FALSE(r.train.eval);
  CHECK(r.train.checkpoint == "out.safetensors");
  CHECK(r.train.resume);
  CHECK(r.train.log_every == 7);
  CHECK(r.train.optimizer.name == "sgd");
  CHECK(r.train.optimizer.lr == 0.1);
  CHECK(r.train.optimizer.weight_decay == 1e-4);
  CHECK(r.train.optimizer.beta1 == 0.8);
  CHECK(r.train.optimizer.beta2 == 0.99);
  CHECK(r.train.optimizer.eps == 1e-6);
  CHECK(r.train.optimizer.momentum == 0.9);
  CHECK(r.train.optimizer.nesterov);
  CHECK(r.train.schedule.name == "step");
  CHECK(r.train.schedule.warmup_steps == 5);
  CHECK(r.train.schedule.min_lr == 0.001);
  CHECK(r.train.schedule.step_size == 10);
  CHECK(r.train.schedule.gamma == 0.5);
  CHECK(r.measure.warmup_steps == 4);
  CHECK(r.measure.measure_steps == 20);
  CHECK_FALSE(r.profile.nvtx);
  CHECK(r.profile.cupti == CuptiMode::trace);
  CHECK(r.profile.layers);
  CHECK(r.profile.trace_steps == 2);

  // cudnn_benchmark booleans map to the engine's values; both augments set both flags.
  json c = p.runs[0].config;
  c["train"]["cudnn_benchmark"] = true;
  c["data"]["augment"] = json::array({"random_crop", "hflip"});
  RunConfig r2 = to_run_config(c);
  CHECK(r2.train.cudnn_benchmark == CudnnBenchmark::on);
  CHECK(r2.data.random_crop);
  c["train"]["cudnn_benchmark"] = false;
  CHECK(to_run_config(c).train.cudnn_benchmark == CudnnBenchmark::off);
}

TEST_CASE("cuda_graphs maps to the engine's config", "[config][defaults]") {
  Plan p = plan_text("name = \"g\"\n[train]\ndevice = \"cuda:0\"\ncuda_graphs = true\n", gpu_options());
  CHECK(to_run_config(p.runs[0].config).train.cuda_graphs);
}
