// tests/config/bad_files_test.cpp: each file in tests/config/bad/ has one
// problem; loading it must raise one ExperimentError naming the file, the
// line and column of the value (or key) at fault, the key, and what was
// expected. Every file in the folder must be in the table.
#include "catch2_compat.h"

#include <filesystem>
#include <set>

#include "helpers.h"

using namespace xrun;
using namespace xrun::test;

namespace {

struct BadFile {
  const char* file;
  int line, column;
  const char* key;
  const char* message;  // a part of what()
};

const BadFile kBad[] = {
    {"unknown-top-key", 2, 1, "batch_size", "unknown key 'batch_size'; did you mean 'train.batch_size'?"},
    {"unknown-key-in-table", 4, 1, "train.batchsize", "unknown key 'train.batchsize'; did you mean 'train.batch_size'?"},
    {"unknown-key-moved", 4, 1, "train.lr", "did you mean 'train.optimizer.lr'?"},
    {"unknown-table", 3, 2, "trian", "unknown table 'trian'; did you mean 'train'?"},
    {"unknown-sweep-axis", 4, 7, "sweep.train.batchsize", "unknown key 'train.batchsize' in [sweep]; did you mean 'train.batch_size'?"},
    {"sweep-axis-names-table", 4, 1, "sweep.train", "'train' is a table"},
    {"sweep-axis-not-list", 4, 20, "sweep.train.batch_size", "expected a list of values to sweep"},
    {"sweep-axis-empty", 4, 20, "sweep.train.batch_size", "found an empty list"},
    {"sweep-axis-element-type", 4, 25, "sweep.train.batch_size", "or \"auto\", found a string \"big\""},
    {"sweep-axis-element-range", 4, 34, "sweep.train.optimizer.lr", "expected a number > 0, found -1.0"},
    {"sweep-zip-unequal", 6, 17, "sweep.train.threads", "train.batch_size has 3, train.threads has 2"},
    {"sweep-mode-unknown", 4, 8, "sweep.mode", "expected one of \"grid\", \"zip\", found \"random\""},
    {"sweep-not-sweepable", 4, 7, "sweep.store.path", "cannot be swept"},
    {"batch-size-string", 4, 14, "train.batch_size", "expected an integer in [1, 65536] or \"auto\", found a string \"big\""},
    {"batch-size-zero", 4, 14, "train.batch_size", "expected an integer in [1, 65536], found 0"},
    {"batch-size-negative", 3, 14, "train.batch_size", "found -8"},
    {"batch-size-float", 3, 14, "train.batch_size", "found a float 512.0"},
    {"lr-string", 4, 6, "train.optimizer.lr", "expected a number > 0, found a string \"x\""},
    {"lr-zero", 5, 6, "train.optimizer.lr", "expected a number > 0, found 0.0"},
    {"augment-not-list", 4, 11, "data.augment", "expected a list of strings from \"random_crop\", \"hflip\", found a string"},
    {"augment-entry", 4, 21, "data.augment", "found \"rotate\""},
    {"augment-twice", 4, 21, "data.augment", "\"hflip\" twice"},
    {"precision-fp8", 5, 13, "train.precision", "expected one of \"fp32\", \"tf32\", \"fp16\", \"bf16\", found \"fp8\""},
    {"memory-fraction-above-one", 4, 19, "train.memory_fraction", "expected a number in (0, 1], found 1.5"},
    {"accumulate-zero", 4, 14, "train.accumulate", "found 0"},
    {"workers-negative", 4, 11, "data.workers", "expected an integer in [0, 256], found -1"},
    {"prefetch-zero", 4, 12, "data.prefetch", "expected an integer in [1, 64], found 0"},
    {"betas-length", 4, 9, "train.optimizer.betas", "expected a list of 2 numbers in [0, 1), found 1 value"},
    {"betas-range", 4, 15, "train.optimizer.betas", "expected a number in [0, 1), found 1.0"},
    {"image-size-small", 4, 14, "data.image_size", "expected an integer in [8, 1024], found 4"},
    {"mean-length", 5, 8, "data.mean", "expected 3 values (one per channel, data.channels = 3), found 1"},
    {"missing-name", 0, 0, "name", "required key missing"},
    {"name-empty", 1, 8, "name", "expected a non-empty name"},
    {"epochs-and-steps", 5, 9, "train.steps", "give train.epochs or train.steps, not both"},
    {"steps-fewer-than-measured", 4, 9, "train.steps", "measure.warmup_steps + measure.measure_steps = 13, found 10"},
    {"syntax-error", 4, 14, "", "TOML syntax error: "},
    {"cpu-fp16", 5, 13, "train.precision", "run 0: precision 'fp16' needs a CUDA device; this run's device is cpu"},
    {"device-unknown", 4, 10, "train.device", "expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\", found \"gpu\""},
    {"cudnn-benchmark-word", 4, 19, "train.cudnn_benchmark", "expected true, false or \"cached\", found a string \"yes\""},
    {"resume-without-checkpoint", 4, 10, "train.resume", "needs train.checkpoint"},
    {"model-classes-too-few", 4, 15, "model.num_classes", "expected at least the data's 10 classes, found 5"},
    {"table-as-value", 2, 9, "train", "expected a table ([train]), found an integer 5"},
};

}  // namespace

TEST_CASE("each bad file raises one precise error", "[config][errors]") {
  for (const BadFile& b : kBad) {
    const std::string path = source_path(std::string("tests/config/bad/") + b.file + ".toml");
    INFO(path);
    try {
      load_plan(path, cpu_options());
      FAIL_CHECK("no error raised");
    } catch (const ExperimentError& e) {
      INFO(e.what());
      CHECK(e.file == path);
      CHECK(e.line == b.line);
      CHECK(e.column == b.column);
      CHECK(e.key == b.key);
      CHECK_THAT(e.what(), Catch::Contains(b.message));
      // One line: "FILE:LINE:COL: ..." (or "FILE: ..." without a position).
      const std::string where =
          b.line ? path + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) + ": " : path + ": ";
      CHECK(std::string(e.what()).rfind(where, 0) == 0);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("every file in tests/config/bad is in the table, and there are at least 20", "[config][errors]") {
  std::set<std::string> listed, present;
  for (const BadFile& b : kBad) listed.insert(b.file);
  for (auto& e : std::filesystem::directory_iterator(source_path("tests/config/bad")))
    if (e.path().extension() == ".toml") present.insert(e.path().stem().string());
  CHECK(listed == present);
  CHECK(present.size() >= 20);
}

TEST_CASE("a missing or unreadable file names the file and the OS error", "[config][errors]") {
  const std::string missing = source_path("tests/config/bad/no-such-file.toml");
  try {
    load_plan(missing, cpu_options());
    FAIL("no error raised");
  } catch (const ExperimentError& e) {
    CHECK(e.file == missing);
    CHECK(e.line == 0);
    CHECK(e.column == 0);
    CHECK(std::string(e.what()) == missing + ": cannot read the experiment file: No such file or directory");
  }
  try {
    load_plan(source_path("tests/config/bad"), cpu_options());
    FAIL("no error raised");
  } catch (const ExperimentError& e) {
    CHECK_THAT(e.what(), Catch::Contains("tests/config/bad: is a directory, not an experiment file"));
  }
}

TEST_CASE("more error cases from text", "[config][errors]") {
  SECTION("an unknown key far from every key gets no suggestion") {
    auto e = error_of("name = \"t\"\nzzzzzz = 1\n");
    CHECK(std::string(e.what()) == "t.toml:2:1: unknown key 'zzzzzz'");
  }
  SECTION("dotted key at the top level reaches the same checks") {
    auto e = error_of("name = \"t\"\ntrain.optimizer.lr = -1.0\n");
    CHECK(e.key == "train.optimizer.lr");
    CHECK(e.line == 2);
    CHECK(e.column == 22);
  }
  SECTION("an inline table in [sweep] is walked like a dotted key") {
    auto e = error_of("name = \"t\"\n[sweep]\ntrain = { batch_size = [8, 0] }\n");
    CHECK(e.key == "sweep.train.batch_size");
    CHECK(e.line == 3);
    CHECK(e.column == 28);
  }
  SECTION("a list key swept takes a list of lists") {
    auto e = error_of("name = \"t\"\n[sweep]\ndata.mean = [0.5, 0.4]\n");
    CHECK(e.key == "sweep.data.mean");
    CHECK(e.column == 14);
    CHECK_THAT(e.what(), Catch::Contains("expected a list of numbers, found a float 0.5"));
    Plan p = plan_text("name = \"t\"\n[sweep]\ndata.mean = [[0.5, 0.5, 0.5], [0.4, 0.4, 0.4]]\n");
    CHECK(p.runs.size() == 2);
    CHECK(p.runs[1].config["data"]["mean"] == nlohmann::json::array({0.4, 0.4, 0.4}));
  }
  SECTION("the first problem in file order is reported") {
    auto e = error_of("name = \"t\"\n[train]\nprecision = \"fp8\"\n[data]\nworkers = -1\n");
    CHECK(e.key == "train.precision");
  }
  SECTION("name cannot be swept") {
    auto e = error_of("name = \"t\"\n[sweep]\nname = [\"a\", \"b\"]\n");
    CHECK(std::string(e.what()) == "t.toml:3:1: sweep.name: 'name' cannot be swept (it is not a run setting)");
  }
  SECTION("nan is not a number here") {
    auto e = error_of("name = \"t\"\n[train.optimizer]\nlr = nan\n");
    CHECK_THAT(e.what(), Catch::Contains("expected a finite number, found nan"));
  }
  SECTION("nesterov needs sgd with momentum") {
    auto e = error_of("name = \"t\"\n[train.optimizer]\nnesterov = true\n");
    CHECK(e.key == "train.optimizer.nesterov");
  }
  SECTION("min_lr above lr") {
    auto e = error_of("name = \"t\"\n[train.schedule]\nmin_lr = 0.1\n");
    CHECK_THAT(e.what(), Catch::Contains("expected at most train.optimizer.lr (0.001), found 0.1"));
  }
  SECTION("min_lr above the rate lr_scaling gives the run's batch, known at plan time") {
    // lr 1e-3 at reference batch 256, linear, batch 2: 7.8125e-6 a step's rate.
    auto e = error_of("name = \"t\"\n[train]\nbatch_size = 2\n[train.optimizer]\nlr_scaling = "
                      "\"linear\"\nreference_batch = 256\n[train.schedule]\nname = \"cosine\"\n"
                      "min_lr = 5e-4\n");
    CHECK(e.key == "train.schedule.min_lr");
    CHECK_THAT(e.what(), Catch::Contains("expected at most the run's scaled rate 7.8125e-06") &&
                             Catch::Contains("scaled linear to 2 samples a step from reference_batch 256") &&
                             Catch::Contains("found 5e-04"));
  }
  SECTION("data.num_classes is for synthetic data only") {
    auto e = error_of("name = \"t\"\n[data]\nsource = \"cifar10\"\nnum_classes = 100\n");
    CHECK(e.key == "data.num_classes");
    CHECK(e.line == 4);
  }
  SECTION("cross-key errors in a sweep name the run") {
    auto e = error_of("name = \"t\"\n[data]\nmean = [0.5, 0.5, 0.5]\n[sweep]\ndata.channels = [3, 1]\n");
    CHECK(e.key == "data.mean");
    CHECK(e.line == 3);
    CHECK_THAT(e.what(), Catch::Contains("data.mean: run 1: expected 1 value (one per channel"));
  }
  SECTION("cuda_graphs on the CPU") {
    auto e = error_of("name = \"t\"\n[train]\ncuda_graphs = true\n");
    CHECK_THAT(e.what(), Catch::Contains("run 0: cuda_graphs needs a CUDA device"));
  }
  SECTION("cuda_graphs with gradient accumulation") {
    auto e = error_of("name = \"t\"\n[train]\ndevice = \"cuda:0\"\ncuda_graphs = true\naccumulate = 2\n",
                      gpu_options());
    CHECK(e.key == "train.cuda_graphs");
    CHECK_THAT(e.what(), Catch::Contains("needs train.accumulate = 1"));
  }
  SECTION("GPU ranks on a device other than cuda:0") {
    auto e = error_of("name = \"t\"\n[train]\ndevice = \"cuda:1\"\nranks = 2\n", gpu_options());
    CHECK(e.key == "train.device");
    CHECK_THAT(e.what(), Catch::Contains("each GPU rank sees its own GPU as cuda:0"));
  }
  SECTION("GPU ranks with cuda_graphs, and gloo between GPUs") {
    auto e = error_of("name = \"t\"\n[train]\ndevice = \"cuda:0\"\nranks = 2\ncuda_graphs = true\n",
                      gpu_options());
    CHECK(e.key == "train.cuda_graphs");
    CHECK_THAT(e.what(), Catch::Contains("no place for the ranks to sum"));
    auto g = error_of("name = \"t\"\n[train]\ndevice = \"cuda:0\"\nranks = 2\n"
                      "[distributed]\nbackend = \"gloo\"\n", gpu_options());
    CHECK(g.key == "distributed.backend");
  }
  SECTION("per_layer_update on CUDA") {
    auto e = error_of("name = \"t\"\n[train]\ndevice = \"cuda:0\"\nper_layer_update = true\n",
                      gpu_options());
    CHECK(e.key == "train.per_layer_update");
    CHECK(e.line == 4);
    CHECK_THAT(e.what(), Catch::Contains("run 0: per_layer_update is the CPU engine's"));
  }
  SECTION("per_layer_update with gradient accumulation") {
    auto e = error_of("name = \"t\"\n[train]\nper_layer_update = true\naccumulate = 2\n");
    CHECK(e.key == "train.per_layer_update");
    CHECK_THAT(e.what(), Catch::Contains("needs train.accumulate = 1"));
  }
  SECTION("batch norm over one value per channel") {
    // resnet50 at 32x32 has 1x1 maps in layer4: batch 1 would train on
    // zero-variance statistics (PyTorch refuses it too).
    auto e = error_of("name = \"t\"\n[data]\nimage_size = 32\n[train]\nbatch_size = 1\n");
    CHECK(e.key == "train.batch_size");
    CHECK_THAT(e.what(), Catch::Contains("1 value per channel (batch 1, 1x1 maps from 32x32"));
    // Batch 2 there, and batch 1 on 33x33 (2x2 maps), are fine.
    CHECK_NOTHROW(plan_text("name = \"t\"\n[data]\nimage_size = 32\n[train]\nbatch_size = 2\n",
                            cpu_options()));
    CHECK_NOTHROW(plan_text("name = \"t\"\n[data]\nimage_size = 33\n[train]\nbatch_size = 1\n",
                            cpu_options()));
  }
  SECTION("batch_size auto on the CPU") {
    auto e = error_of("name = \"t\"\n[train]\nbatch_size = \"auto\"\n");
    CHECK(e.key == "train.batch_size");
    CHECK_THAT(e.what(), Catch::Contains("run 0: batch_size \"auto\" sizes the batch to GPU memory"));
  }
  SECTION("a grid too large") {
    std::string big = "[";
    for (int i = 1; i <= 200; ++i) big += (i > 1 ? ", " : "") + std::to_string(i);
    big += "]";
    auto e = error_of("name = \"t\"\n[sweep]\ntrain.batch_size = " + big + "\ntrain.seed = " + big + "\n");
    CHECK_THAT(e.what(), Catch::Contains("more than 10000 runs"));
  }
}

TEST_CASE("the caller's device check refuses a run by index", "[config][errors]") {
  PlanOptions o = gpu_options();
  o.device_check = [](const nlohmann::json& resolved, const std::string& device) -> std::string {
    if (resolved["train"]["batch_size"] == 64) return "no room for batch 64 on " + device;
    return "";
  };
  auto e = error_of("name = \"t\"\n[train]\ndevice = \"cuda:0\"\n[sweep]\ntrain.batch_size = [16, 32, 64]\n", o);
  CHECK(e.key == "train.device");
  CHECK(std::string(e.what()) == "t.toml:3:10: train.device: run 2: no room for batch 64 on cuda:0");
}

TEST_CASE("data.std below 1e-6 is refused by name, not a NaN loss at step 0", "[config][errors]") {
  for (const std::string v : {"1e-45", "0.0", "1e-7", "-1.0"}) {
    auto e = error_of("name = \"t\"\n[data]\nstd = [0.2, " + v + ", 0.2]\n");
    INFO(e.what());
    CHECK(e.key == "data.std");
    CHECK_THAT(e.what(), Catch::Contains("data.std") && Catch::Contains(">= 1e-06"));
  }
  auto inf = error_of("name = \"t\"\n[data]\nstd = [0.2, inf, 0.2]\n");
  CHECK(inf.key == "data.std");
  CHECK_THAT(inf.what(), Catch::Contains("expected a finite number"));
  CHECK(plan_text("name = \"t\"\n[data]\nstd = [1e-6, 0.5, 2.0]\n").runs.size() == 1);
}
