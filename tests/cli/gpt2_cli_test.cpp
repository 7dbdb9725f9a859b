// tests/cli/gpt2_cli_test.cpp: GPT-2 runs through the xrun command as a
// user drives them (issue #25): the ready experiment experiments/gpt-text.toml
// (Debian's fortunes-min text; shortened with --set) trains, is stored with
// tokens/s and its validation loss, per-layer times under transformers'
// module names, `show` speaks of tokens; a sweep over the batch size is
// compared and reported as ResNet sweeps are.
#include "catch2_compat.h"

#include <cmath>
#include <filesystem>

#include "cli_util.h"
#include "skip.h"
#include "test_util.h"

using Catch::Contains;
using xrun_test::CliFixture;
using xrun_test::shell_quote;

namespace {
const char* kText = "/usr/share/games/fortunes/literature";  // scripts/setup.sh installs it
}

TEST_CASE("xrun run experiments/gpt-text.toml: a GPT-2 learns text, stored in tokens/s",
          "[cli][gpt2][train]") {
  if (!std::filesystem::exists(kText)) {
    XRUN_SKIP(kText << " is missing: apt-get install fortunes-min (scripts/setup.sh)");
  }
  CliFixture f;
  const std::string db = " --db " + shell_quote(f.db());
  const std::string exp = shell_quote(xrun_test::source_path("experiments/gpt-text.toml"));
  // Shortened: 32 windows of 64 bytes, batch 8, two epochs (8 steps).
  const auto r = f.xrun("run " + exp + db +
                        " --set data.limit=32 --set data.test_limit=16"
                        " --set data.sequence_length=64 --set train.batch_size=8"
                        " --set train.epochs=2 --set train.checkpoint=" +
                        shell_quote(f.dir.file("gpt.safetensors")) +
                        " --set measure.warmup_steps=1 --set profile.layers=true");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("tok/s") && Contains("val loss") && Contains("perplexity") &&
                           Contains("next-token accuracy"));
  CHECK(f.sql("SELECT status FROM runs") == "complete");
  CHECK(f.sql("SELECT value FROM run_params WHERE key = 'model.arch'") == "gpt2");
  CHECK(f.sql("SELECT count(*) FROM steps") == "8");
  // Tokens per second: 8 sequences of 64 tokens a step.
  const double tokens_per_s = f.sql_double("SELECT throughput FROM run_summary");
  const double step_s = f.sql_double("SELECT measured_seconds FROM runs") /
                        f.sql_double("SELECT measured_steps FROM runs");
  CHECK(tokens_per_s == Approx(512 / step_s).epsilon(1e-6));
  CHECK(std::isfinite(f.sql_double("SELECT test_loss FROM runs")));
  // Per-layer times under transformers' module names.
  CHECK(f.sql("SELECT count(*) FROM kernels WHERE name = 'transformer.h.3' AND "
              "phase = 'backward'") == "1");
  CHECK(f.sql("SELECT count(*) FROM kernels WHERE name = 'lm_head' AND phase = 'forward'") == "1");
  CHECK(std::filesystem::exists(f.dir.file("gpt.safetensors")));

  const auto show = f.xrun("show 1" + db);
  CHECK(show.status == 0);
  CHECK_THAT(show.output, Contains("tok/s over") && Contains("tokens,") &&
                              Contains("6 x parameters + attention") &&
                              Contains("validation   loss") && Contains("perplexity") &&
                              Contains("throughput_unit = tokens/s"));
}

TEST_CASE("xrun compare and report: a GPT-2 batch-size sweep as ResNet sweeps are",
          "[cli][gpt2][compare]") {
  CliFixture f;
  const std::string exp = shell_quote(f.write_experiment("g.toml", R"(name = "g"
[model]
arch = "gpt2"
layers = 2
heads = 2
width = 32
context = 32
vocab = 128
[data]
source = "synthetic"
samples = 64
[train]
device = "cpu"
batch_size = 4
epochs = 1
eval = false
threads = 1
[measure]
warmup_steps = 2
[sweep]
train.batch_size = [4, 8]
)"));
  const std::string db = " --db " + shell_quote(f.db());
  const auto run = f.xrun("run " + exp + db);
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "2");
  const auto cmp = f.xrun("compare --by train.batch_size" + db);
  INFO(cmp.output);
  CHECK(cmp.status == 0);
  CHECK_THAT(cmp.output, Contains("train.batch_size"));
  const auto rep = f.xrun("report --by train.batch_size -o " +
                          shell_quote(f.dir.file("r.html")) + db);
  INFO(rep.output);
  CHECK(rep.status == 0);
  CHECK(std::filesystem::file_size(f.dir.file("r.html")) > 1000);
}
