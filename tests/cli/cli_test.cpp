// tests/cli/cli_test.cpp: the xrun binary as a user runs it: exit codes,
// `plan` output, errors before any work, and the store it leaves.
#include "catch2_compat.h"

#include "cli_util.h"

using Catch::Contains;
using xrun_test::CliFixture;
using xrun_test::shell_quote;
using xrun_test::source_path;

TEST_CASE("xrun: help, version and usage errors", "[cli]") {
  CliFixture f;
  auto help = f.xrun("--help");
  CHECK(help.status == 0);
  CHECK_THAT(help.output, Contains("plan") && Contains("run") && Contains("runs") &&
                              Contains("show") && Contains("doctor"));
  CHECK(f.xrun("run --help").status == 0);
  CHECK_THAT(f.xrun("--version").output, Contains("xrun "));
  CHECK(f.xrun("").status == 2);                 // a subcommand is required
  CHECK(f.xrun("frobnicate").status == 2);       // unknown subcommand
  CHECK(f.xrun("run").status == 2);              // missing FILE
  CHECK(f.xrun("runs --format xml").status == 2);
}

TEST_CASE("xrun plan: the expanded runs and their count", "[cli]") {
  CliFixture f;
  auto r = f.xrun("plan " + shell_quote(source_path("experiments/cpu-sweep.toml")));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("#0") && Contains("#5") && Contains("6 runs") &&
                           Contains("train.batch_size=16 train.threads=1") &&
                           Contains("train.batch_size=64 train.threads=2"));
  auto json = f.xrun("plan --json --set train.batch_size=8 " +
                     shell_quote(source_path("experiments/quickstart.toml")));
  REQUIRE(json.status == 0);
  CHECK_THAT(json.output, Contains("\"count\": 1") || Contains("\"count\":1"));
  CHECK_THAT(json.output, Contains("\"batch_size\": 8") || Contains("\"batch_size\":8"));
}

TEST_CASE("xrun plan/run: experiment-file errors exit 2 and name file, line, key", "[cli]") {
  CliFixture f;
  const std::string file =
      f.write_experiment("bad.toml", "name = \"bad\"\n[train]\nbatchsize = 32\n");
  for (const char* cmd : {"plan ", "run "}) {
    auto r = f.xrun(std::string(cmd) + shell_quote(file));
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("bad.toml:3:1") && Contains("train.batchsize") &&
                             Contains("train.batch_size"));
  }
  CHECK_FALSE(std::filesystem::exists(f.db()));  // nothing ran, nothing stored
  auto missing = f.xrun("plan nowhere.toml");
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Contains("nowhere.toml"));
  auto set = f.xrun("plan " + shell_quote(source_path("experiments/quickstart.toml")) +
                    " --set train.precision=fp8");
  CHECK(set.status == 2);
  CHECK_THAT(set.output, Contains("--set train.precision=fp8") && Contains("fp16"));
}

TEST_CASE("xrun run: a precision the CPU cannot train in is refused before any work", "[cli]") {
  CliFixture f;
  const std::string file = f.write_experiment(
      "fp16.toml", xrun_test::small_experiment("fp16") + "[sweep]\ntrain.precision = [\"fp32\", \"fp16\"]\n");
  auto r = f.xrun("run " + shell_quote(file) + " --db " + shell_quote(f.db()));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("run 1") && Contains("fp16"));
  CHECK_FALSE(std::filesystem::exists(f.db()));
}

TEST_CASE("xrun run --only: indices outside the plan are a usage error", "[cli]") {
  CliFixture f;
  const std::string file = f.write_experiment("e.toml", xrun_test::small_experiment("e"));
  auto r = f.xrun("run " + shell_quote(file) + " --only 3 --db " + shell_quote(f.db()));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("--only 3"));
}

TEST_CASE("xrun runs/show: a store that does not exist is an error, not a new file", "[cli]") {
  CliFixture f;
  auto r = f.xrun("runs --db " + shell_quote(f.db()));
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("no result store"));
  CHECK_FALSE(std::filesystem::exists(f.db()));
  CHECK(f.xrun("show 1 --db " + shell_quote(f.db())).status == 1);
}

TEST_CASE("xrun doctor: reports this machine, --require cuda fails without a GPU", "[cli]") {
  CliFixture f;
  auto r = f.xrun("doctor");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("oneDNN"));
  auto json = f.xrun("doctor --json");
  CHECK(json.status == 0);
  CHECK_THAT(json.output, Contains("\"gpus\""));
  // Whether a GPU is usable decides the exit code of --require cuda.
  const bool has_gpu = json.output.find("\"gpus\": []") == std::string::npos &&
                       json.output.find("\"gpus\":[]") == std::string::npos;
  CHECK(f.xrun("doctor --require cuda").status == (has_gpu ? 0 : 1));
}

TEST_CASE("xrun run --nsys: runs itself under nsys with the capture range, or says nsys is missing", "[cli]") {
  CliFixture f;
  const std::string exp = f.write_experiment("e.toml", xrun_test::small_experiment("e"));
  // No nsys on the PATH: a clear error, exit 2.
  auto missing = f.xrun("run " + shell_quote(exp) + " --nsys out");
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Contains("nsys (Nsight Systems) is not on the PATH") &&
                                 Contains("--capture-range=cudaProfilerApi"));
  // A stand-in nsys that records how it was called.
  xrun_test::write_bytes(f.dir.file("nsys"), "#!/bin/sh\necho \"$@\" > " + f.dir.file("nsys.args") + "\n");
  std::filesystem::permissions(f.dir.file("nsys"), std::filesystem::perms::owner_all);
  auto r = xrun_test::run_command("cd " + shell_quote(f.dir.str()) + " && PATH=" +
                                  shell_quote(f.dir.str()) + ":$PATH " +
                                  shell_quote(xrun_test::xrun_binary()) + " run " + shell_quote(exp) +
                                  " --db x.db --set train.steps=3 --nsys rep");
  CHECK(r.status == 0);
  const std::string args = xrun_test::read_bytes(f.dir.file("nsys.args"));
  CHECK_THAT(args, Contains("profile -t cuda,nvtx,cudnn,cublas --capture-range=cudaProfilerApi "
                            "--capture-range-end=stop -o rep --force-overwrite true") &&
                       Contains(" run " + exp + " --db x.db --set train.steps=3"));
  CHECK_FALSE(args.find("--nsys") != std::string::npos);
}
