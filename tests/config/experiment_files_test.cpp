// tests/config/experiment_files_test.cpp: every ready file in experiments/
// loads and plans, on a machine with a GPU and without one.
#include "catch2_compat.h"

#include <cstdlib>
#include <filesystem>

#include "helpers.h"

using namespace xrun;
using namespace xrun::test;

TEST_CASE("every experiments/*.toml loads on a GPU machine", "[config][files]") {
  int files = 0;
  for (auto& entry : std::filesystem::directory_iterator(source_path("experiments"))) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    INFO(entry.path().string());
    Plan plan = load_plan(entry.path().string(), gpu_options());
    CHECK(plan.name == entry.path().stem().string());
    CHECK_FALSE(plan.description.empty());
    REQUIRE_FALSE(plan.runs.empty());
    for (auto& run : plan.runs) {
      CHECK(run.config_hash.size() == 16);
      RunConfig rc = to_run_config(run.config);
      CHECK(rc.name == plan.name);
      // cpu-sweep and gpt-text (its figures are the CPU engine's) name the
      // CPU; the others a GPU, or "auto" (the GPU here).
      const bool cpu = plan.name == "cpu-sweep" || plan.name == "gpt-text";
      CHECK(rc.train.device.name() == std::string(cpu ? "cpu" : "cuda:0"));
      CHECK((rc.train.epochs > 0) != (rc.train.steps > 0));
    }
  }
  CHECK(files == 9);
}

TEST_CASE("batch-vs-convergence: five batch sizes, the same images between evaluations and in the warmup",
          "[config][files]") {
  Plan plan = load_plan(source_path("experiments/batch-vs-convergence.toml"), cpu_options());
  REQUIRE(plan.runs.size() == 5);
  for (const auto& run : plan.runs) {
    RunConfig rc = to_run_config(run.config);
    INFO(rc.train.batch_size);
    CHECK(rc.data.source == "idx");
    CHECK(rc.train.optimizer.lr_scaling == "linear");
    CHECK(rc.measure.target_accuracy == 0.88);
    // An evaluation every 12,000 images and a warmup over 19,200, to a step.
    CHECK(std::abs(rc.train.eval_every * rc.train.batch_size - 12000) <= rc.train.batch_size / 2);
    CHECK(std::abs(rc.train.schedule.warmup_steps * rc.train.batch_size - 19200) <=
          rc.train.batch_size / 2);
  }
}

TEST_CASE("quickstart: Fashion-MNIST, auto device, 600 steps", "[config][files]") {
  Plan cpu = load_plan(source_path("experiments/quickstart.toml"), cpu_options());
  Plan gpu = load_plan(source_path("experiments/quickstart.toml"), gpu_options());
  REQUIRE(cpu.runs.size() == 1);
  const auto& c = cpu.runs[0].config;
  CHECK(c["train"]["device"] == "cpu");
  CHECK(gpu.runs[0].config["train"]["device"] == "cuda:0");
  CHECK(c["data"]["source"] == "idx");
  CHECK(c["data"]["path"] == "/usr/share/datasets/fashion-mnist");
  CHECK(c["data"]["channels"] == 1);
  CHECK(c["data"]["image_size"] == 32);
  CHECK(c["model"]["num_classes"] == 10);
  CHECK(c["train"]["batch_size"] == 32);
  CHECK(c["data"]["limit"].get<int>() / c["train"]["batch_size"].get<int>() == 600);
  CHECK(c["train"]["epochs"] == 1);
  CHECK(c["train"]["eval"] == true);
  CHECK(c["train"]["precision"] == "fp32");
  CHECK(c["measure"]["warmup_steps"] == 5);
  // Same experiment on either machine; a different run config.
  CHECK(cpu.runs[0].experiment_hash == gpu.runs[0].experiment_hash);
  CHECK(cpu.runs[0].config_hash != gpu.runs[0].config_hash);
}

TEST_CASE("seed-recipe: the classic recipe", "[config][files]") {
  Plan p = load_plan(source_path("experiments/seed-recipe.toml"), gpu_options());
  REQUIRE(p.runs.size() == 1);
  RunConfig rc = to_run_config(p.runs[0].config);
  CHECK(rc.data.source == "cifar10");
  CHECK(rc.data.path == "data/cifar-10-batches-bin");
  CHECK(rc.model.arch == "resnet50");
  CHECK(rc.train.batch_size == 512);
  CHECK(rc.train.precision == Precision::fp16);
  CHECK(rc.train.optimizer.name == "adamw");
  CHECK(rc.train.optimizer.lr == 1e-3);
  CHECK(rc.train.optimizer.weight_decay == 0.01);
  CHECK(rc.train.epochs == 10);
  CHECK(rc.train.steps == 0);
  CHECK(rc.train.cudnn_benchmark == CudnnBenchmark::on);
  CHECK(rc.data.pin_memory);
  CHECK(rc.data.workers == 4);
  CHECK(rc.data.random_crop);
  CHECK(rc.data.hflip);
  CHECK(rc.train.device.name() == "cuda:0");
}

TEST_CASE("seed-recipe forced onto the CPU fails: fp16 needs CUDA", "[config][files]") {
  PlanOptions o = cpu_options();
  o.sets = {"train.device=cpu"};
  try {
    load_plan(source_path("experiments/seed-recipe.toml"), o);
    FAIL("expected an error");
  } catch (const ExperimentError& e) {
    CHECK(e.key == "train.precision");
    CHECK(e.line > 0);
    CHECK_THAT(e.what(), Catch::Contains("run 0: precision 'fp16' needs a CUDA device; this run's device is cpu"));
  }
}

TEST_CASE("gpu-smoke and gpu-bench forced onto the CPU fail at the first non-fp32 run",
          "[config][files]") {
  // The files name cuda:0 explicitly, so they plan on a machine without a GPU
  // (the device check that knows the machine is the caller's); forced onto
  // the CPU the half-precision runs are refused.
  CHECK(load_plan(source_path("experiments/gpu-smoke.toml"), cpu_options()).runs.size() == 8);
  PlanOptions o = cpu_options();
  o.sets = {"train.device=cpu"};
  try {
    load_plan(source_path("experiments/gpu-smoke.toml"), o);
    FAIL("expected an error");
  } catch (const ExperimentError& e) {
    // Runs 0 and 1 are fp32; run 2 is the first tf32 one.
    CHECK_THAT(e.what(), Catch::Contains("run 2: precision 'tf32' needs a CUDA device"));
    CHECK(e.line == 28);  // the "tf32" element of the sweep axis
    CHECK(e.column == 28);
  }
  CHECK_THROWS_AS(load_plan(source_path("experiments/gpu-bench.toml"), o), ExperimentError);
}

TEST_CASE("cpu-sweep: 6 runs, batch size outermost, 13 steps each", "[config][files]") {
  Plan p = load_plan(source_path("experiments/cpu-sweep.toml"), cpu_options());
  REQUIRE(p.runs.size() == 6);
  CHECK(p.mode == "grid");
  CHECK(p.axes == std::vector<std::string>{"train.batch_size", "train.threads"});
  const int batch[] = {16, 16, 32, 32, 64, 64}, threads[] = {1, 2, 1, 2, 1, 2};
  for (int i = 0; i < 6; ++i) {
    CHECK(p.runs[i].config["train"]["batch_size"] == batch[i]);
    CHECK(p.runs[i].config["train"]["threads"] == threads[i]);
    CHECK(p.runs[i].config["train"]["steps"] == 13);
    CHECK(p.runs[i].config["train"]["eval"] == false);
    CHECK(p.runs[i].config["train"]["device"] == "cpu");
  }
}

TEST_CASE("gpu-bench: 224x224, 1000 classes, fp16 and bf16", "[config][files]") {
  Plan p = load_plan(source_path("experiments/gpu-bench.toml"), gpu_options());
  REQUIRE(p.runs.size() == 2);
  CHECK(p.runs[0].config["train"]["precision"] == "fp16");
  CHECK(p.runs[1].config["train"]["precision"] == "bf16");
  RunConfig rc = to_run_config(p.runs[0].config);
  CHECK(rc.data.image_size == 224);
  CHECK(rc.model.num_classes == 1000);
  CHECK(rc.train.batch_size == 256);
  CHECK(rc.train.steps == 60);
  CHECK(rc.train.epochs == 0);
  CHECK(rc.measure.warmup_steps == 10);
  CHECK(rc.measure.measure_steps == 50);
  CHECK_FALSE(rc.train.eval);
  CHECK(rc.train.cudnn_benchmark == CudnnBenchmark::on);
}

TEST_CASE("precision bf16 on the CPU: planned where the CPU has bf16 kernels, refused naming "
          "its ISA where not",
          "[config][files]") {
  const std::string toml = "name = \"b\"\n[train]\ndevice = \"cpu\"\nprecision = \"bf16\"\n";
  PlanOptions o = cpu_options();
  o.cpu_bf16_kernels = "amx";
  o.cpu_isa = "avx512_core_amx";
  CHECK(plan_text(toml, o).runs.at(0).config.at("train").at("precision") == "bf16");
  o.cpu_bf16_kernels = "";
  o.cpu_isa = "avx2";
  try {
    plan_text(toml, o);
    FAIL("expected an error");
  } catch (const ExperimentError& e) {
    CHECK(e.key == "train.precision");
    CHECK(e.line == 4);
    CHECK_THAT(e.what(), Catch::Contains("run 0: precision 'bf16' on the CPU needs oneDNN's bf16 "
                                         "kernels (a CPU with AVX512_BF16 or AMX); oneDNN's ISA on "
                                         "this CPU is avx2"));
  }
}
