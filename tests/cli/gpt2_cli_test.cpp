// tests/cli/gpt2_cli_test.cpp: GPT-2 runs through the xrun command as a
// user drives them (issue #25): the ready experiment experiments/gpt-text.toml
// (Debian's fortunes-min text; shortened with --set) trains, is stored with
// tokens/s and its validation loss, per-layer times under transformers'
// module names, `show` speaks of tokens; a sweep over the batch size is
// compared and reported as ResNet sweeps are; two ranks train what one
// process with accumulation trains, bit for bit.
#include "catch2_compat.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "engine/checkpoint/safetensors.h"
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
                        " --set measure.warmup_steps=1 --set profile.layers=true"
                        " --set measure.target_accuracy=0.01");
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
  // And each timed layer's FLOPs and bytes for the roofline (gpt2_costs.h).
  CHECK(f.sql("SELECT count(*) FROM layer_costs WHERE layer = 'transformer.h.3' AND "
              "pass = 'backward' AND flops > 0 AND bytes > 0") == "1");
  CHECK(f.sql("SELECT count(*) FROM layer_costs") == std::to_string(2 * (4 + 4)));
  CHECK(std::filesystem::exists(f.dir.file("gpt.safetensors")));

  const auto show = f.xrun("show 1" + db);
  CHECK(show.status == 0);
  CHECK_THAT(show.output, Contains("tok/s over") && Contains("tokens,") &&
                              Contains("6 x parameters + attention") &&
                              Contains("validation   loss") && Contains("perplexity") &&
                              Contains("throughput_unit = tokens/s"));
  // The target is reached after so many tokens, not "images": the first
  // evaluation, after 4 steps of 8 x 64 tokens.
  CHECK_THAT(show.output, Contains("target       1.00% reached after") && Contains(", 2048 tokens\n") &&
                              !Contains(" images"));
  const auto shown = f.xrun("show 1 --json" + db);
  const auto j = nlohmann::json::parse(shown.output);
  CHECK(j["target"].contains("tokens"));
  CHECK_FALSE(j["target"].contains("images"));
  REQUIRE(!j["evals"].empty());
  CHECK(j["evals"][0]["tokens"].get<int64_t>() % 512 == 0);
  CHECK_FALSE(j["evals"][0].contains("images"));
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
  // Every table says tokens where a GPT-2 run's throughput counts them.
  const auto runs = f.xrun("runs" + db);
  INFO(runs.output);
  CHECK(runs.status == 0);
  CHECK_THAT(runs.output, Contains("tok/s") && !Contains("img/s"));
  const auto csv = f.xrun("runs --format csv" + db);
  CHECK_THAT(csv.output, Contains("throughput_unit") && Contains("tokens/s"));
  const auto cmp = f.xrun("compare --by train.batch_size" + db);
  INFO(cmp.output);
  CHECK(cmp.status == 0);
  CHECK_THAT(cmp.output, Contains("train.batch_size") && Contains("tok/s") && !Contains("img/s"));
  const auto cmp_json = f.xrun("compare --by train.batch_size --format json" + db);
  CHECK_THAT(cmp_json.output, Contains(R"("throughput_label": "tok/s")"));
  const auto rep = f.xrun("report --by train.batch_size -o " +
                          shell_quote(f.dir.file("r.html")) + db);
  INFO(rep.output);
  CHECK(rep.status == 0);
  CHECK(std::filesystem::file_size(f.dir.file("r.html")) > 1000);
  std::ifstream in(f.dir.file("r.html"));
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(html, Contains("throughput (tok/s)") && Contains(">tok/s<") && !Contains("img/s"));
}

TEST_CASE("xrun compare: GPT-2 runs on two corpora never pool, the same text at another path does",
          "[cli][gpt2][compare]") {
  CliFixture f;
  std::string a, b;
  for (int i = 0; i < 60; ++i) {
    a += "the quick brown fox jumps over the lazy dog. ";
    b += "pack my box with five dozen liquor jugs, now! ";
  }
  xrun_test::write_bytes(f.dir.file("A.txt"), a);
  xrun_test::write_bytes(f.dir.file("B.txt"), b);
  xrun_test::write_bytes(f.dir.file("A-copy.txt"), a);
  const std::string exp = f.write_experiment("t.toml", R"(name = "t"
[model]
arch = "gpt2"
layers = 1
heads = 2
width = 32
context = 16
vocab = 256
[data]
source = "text"
sequence_length = 16
[train]
device = "cpu"
batch_size = 4
epochs = 1
threads = 1
[measure]
warmup_steps = 1
)");
  const std::string db = " --db " + shell_quote(f.db());
  const auto on = [&](const std::string& text, int batch) {
    const auto r = f.xrun("run " + shell_quote(exp) + db + " --set data.path=" +
                          shell_quote("\"" + f.dir.file(text) + "\"") +
                          " --set train.batch_size=" + std::to_string(batch));
    INFO(r.output);
    REQUIRE(r.status == 0);
  };
  on("A.txt", 4);
  on("B.txt", 8);
  // Batch 4 on A against batch 8 on B: other data, nothing to compare.
  auto cmp = f.xrun("compare --by train.batch_size" + db);
  INFO(cmp.output);
  CHECK(cmp.status == 1);
  CHECK_THAT(cmp.output, Contains("nothing to compare"));
  CHECK(f.sql("SELECT count(DISTINCT value) FROM run_environment WHERE key = 'data_fingerprint'") == "2");
  // The same text at another path is the same data: it pairs with A's run.
  on("A-copy.txt", 8);
  cmp = f.xrun("compare --by train.batch_size --format json" + db);
  INFO(cmp.output);
  CHECK(cmp.status == 0);
  const auto j = nlohmann::json::parse(cmp.output);
  REQUIRE(j["groups"].size() == 1);
}

TEST_CASE("ranks: 2 GPT-2 ranks x batch 4 train the weights of 1 rank with accumulate 2, bit "
          "for bit",
          "[cli][gpt2][ranks]") {
  // As tests/cli/ranks_test.cpp does for ResNet: rank r takes slice r of
  // each global batch of token windows, as micro-batch r of a step with
  // accumulate = 2; the gradients summed by gloo or added by the
  // accumulation give the same bits, and so the same AdamW update (decay
  // groups included). A GPT-2 has no batch statistics: every tensor must
  // match. (Whether a bucket goes out before its last gradient is added is
  // a race this cannot see: the tied embedding's ready order is by reading.)
  CliFixture f;
  const auto experiment = [&](const std::string& file, const std::string& extra) {
    return f.write_experiment(file, "name = \"g\"\n[model]\narch = \"gpt2\"\nlayers = 2\n"
                                    "heads = 2\nwidth = 32\ncontext = 16\nvocab = 96\n"
                                    "[data]\nsource = \"synthetic\"\nsamples = 64\nworkers = 1\n"
                                    "[train]\ndevice = \"cpu\"\nbatch_size = 4\nthreads = 1\n"
                                    "steps = 4\n" + extra +
                                    "[train.optimizer]\nlr = 3e-3\nweight_decay = 0.1\n"
                                    "[measure]\nwarmup_steps = 1\n");
  };
  // (The ranked run evaluates too: its final line, built by the launcher
  // from the stored run, says the validation loss as a single process's does.)
  const std::string two = experiment(
      "two.toml", "ranks = 2\neval = true\ncheckpoint = \"two.safetensors\"\n");
  const std::string one = experiment(
      "one.toml", "accumulate = 2\neval = false\ncheckpoint = \"one.safetensors\"\n");
  const auto r2 = f.xrun(xrun_test::run_args(f, two));
  INFO(r2.output);
  REQUIRE(r2.status == 0);
  // The final table's row ("  #0   <hash>  complete    complete: ...").
  const std::string row = r2.output.substr(r2.output.rfind("#0 "));
  CHECK_THAT(row, Contains("tok/s") && Contains("next-token accuracy") && Contains("val loss") &&
                      Contains("perplexity"));
  const auto r1 = f.xrun(xrun_test::run_args(f, one));
  INFO(r1.output);
  REQUIRE(r1.status == 0);
  const xrun::SafetensorsFile fa = xrun::SafetensorsFile::open(f.dir.file("two.safetensors"));
  const xrun::SafetensorsFile fb = xrun::SafetensorsFile::open(f.dir.file("one.safetensors"));
  REQUIRE(fa.entries().size() == fb.entries().size());
  for (const auto& e : fa.entries()) {
    INFO(e.name);
    REQUIRE(fb.contains(e.name));
    const std::vector<float> x = e.to_vector<float>(), y = fb.get(e.name).to_vector<float>();
    REQUIRE(x.size() == y.size());
    size_t differ = 0;  // a count, not the vectors, in a failure message
    for (size_t i = 0; i < x.size(); ++i) differ += !(x[i] == y[i]);
    CHECK(differ == 0);
  }
  // Each step's loss over both ranks' tokens, to the bit; 8 x 16 tokens a step.
  const std::string loss_of =
      "SELECT group_concat(loss, ',') FROM (SELECT s.loss FROM steps s JOIN runs r ON "
      "r.uuid = s.run WHERE r.id = ";
  CHECK(f.sql(loss_of + "1 ORDER BY s.step)") == f.sql(loss_of + "2 ORDER BY s.step)"));
  CHECK(f.sql("SELECT min(images) || ' ' || max(images) FROM steps") == "128 128");
}
