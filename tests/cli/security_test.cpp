// tests/cli/security_test.cpp: xrun facing hostile text (issue #10, part 5):
// --where values are bound as SQL parameters and keys are checked, so
// injection payloads match exactly what they spell; run names and labels
// carrying markup are escaped in the HTML report (checked in headless
// Chromium: no script of theirs runs) and in the JSON outputs. Issue #20:
// no value with a control character reaches a Slurm batch script (each
// refused by the option's name), and an experiment name is one folder name
// (no '/' or '..') for every command.
#include "catch2_compat.h"

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "skip.h"

using Catch::Contains;
using xrun_test::CliFixture;
using xrun_test::run_args;
using xrun_test::shell_quote;
using xrun_test::tiny_experiment;

namespace {


std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"})
    if (xrun_test::run_command(std::string("command -v ") + name).status == 0) return name;
  return "";
}

// The page's DOM after its scripts (if any) have run.
std::string rendered_dom(const std::string& browser, const CliFixture& f, const std::string& html) {
  const auto r = xrun_test::run_command(
      "timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --virtual-time-budget=2000" +
      " --user-data-dir=" + shell_quote(f.dir.file("profile")) + " --dump-dom " +
      shell_quote("file://" + html) + " 2>/dev/null");
  REQUIRE(r.status == 0);
  return r.output;
}

}  // namespace

TEST_CASE("security: --where values are parameters: payloads match only themselves", "[cli][security]") {
  CliFixture f;
  const std::string file = f.write_experiment("w.toml", tiny_experiment("w", "steps = 2\neval = false"));
  const std::string payload = "' OR 1=1 --";
  REQUIRE(f.xrun(run_args(f, file) + " --set store.label='\"box\"'").status == 0);
  REQUIRE(f.xrun(run_args(f, file) + " --set " + shell_quote("store.label=\"" + payload + "\"")).status == 0);
  const std::string db = " --db " + shell_quote(f.db());

  auto count = [&](const std::string& where) {
    auto r = f.xrun("runs --format json --where " + shell_quote(where) + db);
    INFO(where << "\n" << r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.output).size();
  };
  CHECK(count("label=" + payload) == 1);  // the run whose label is that text, only
  for (const std::string value :
       {"x' OR '1'='1", "\" OR \"\"=\"", "box'; DROP TABLE runs; --", "box\" --", "1 OR 1=1",
        "box/*", "*/ OR 1=1", "%", "_ox", "box' UNION SELECT * FROM runs --"}) {
    CHECK(count("label=" + value) == 0);
    CHECK(count("train.batch_size=" + value) == 0);
  }
  CHECK(count("label=box") == 1);
  CHECK(f.sql("SELECT count(*) FROM runs") == "2");  // nothing dropped or changed

  // Keys are checked against the known columns and settings, never spliced.
  for (const std::string key : {"label OR 1=1", "label; DROP TABLE runs", "s.label", "1=1 --"}) {
    auto r = f.xrun("runs --where " + shell_quote(key + "=box") + db);
    INFO(key << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("unknown key"));
  }
  CHECK(f.sql("SELECT count(*) FROM runs") == "2");
}

TEST_CASE("security: markup in run names and labels is text in the report, the JSON and the trace", "[cli][security]") {
  CliFixture f;
  // A name is one folder name (no '/'), so its payload is an element that
  // needs no closing tag.
  const std::string file = f.write_experiment("x.toml", R"(name = "x\"><svg onload=\"document.body.setAttribute('data-pwned','name')\">"
description = "<b>bold</b> & 'quotes'"
[model]
arch = "resnet18"
[data]
source = "synthetic"
image_size = 16
samples = 32
workers = 0
[train]
device = "cpu"
batch_size = 16
steps = 3
eval = false
[measure]
warmup_steps = 1
[profile]
cupti = "trace"
trace_steps = 1
[store]
label = "<img src=x onerror=\"document.body.setAttribute('data-pwned','label')\">"
)");
  auto run = f.xrun(run_args(f, file));
  INFO(run.output);
  REQUIRE(run.status == 0);
  const std::string db = " --db " + shell_quote(f.db());

  // JSON outputs carry the text as it is, and parse.
  auto show = f.xrun("show 1 --json" + db);
  REQUIRE(show.status == 0);
  const auto j = nlohmann::json::parse(show.output);
  CHECK(j.at("experiment") == "x\"><svg onload=\"document.body.setAttribute('data-pwned','name')\">");
  CHECK(j.at("label") == "<img src=x onerror=\"document.body.setAttribute('data-pwned','label')\">");
  const std::string trace = f.dir.file("trace.json");
  REQUIRE(f.xrun("trace 1 -o " + shell_quote(trace) + db).status == 0);
  CHECK_NOTHROW(nlohmann::json::parse(xrun_test::read_bytes(trace)));

  // The report escapes them: no element of theirs in the page.
  const std::string html = f.dir.file("r.html");
  auto report = f.xrun("report -o " + shell_quote(html) + db);
  INFO(report.output);
  REQUIRE(report.status == 0);
  const std::string page = xrun_test::read_bytes(html);
  CHECK(page.find("<svg onload") == std::string::npos);
  CHECK(page.find("<img src=x") == std::string::npos);
  CHECK(page.find("&lt;svg onload") != std::string::npos);

  const std::string browser = chromium();
  if (browser.empty()) {
    XRUN_SKIP("the browser part: chromium not installed");
  }
  // The check can see a script run: a page whose script does run.
  const std::string control = f.dir.file("control.html");
  xrun_test::write_bytes(control,
                         "<!DOCTYPE html><body><script>document.body.setAttribute('data-pwned','control')"
                         "</script></body>");
  CHECK_THAT(rendered_dom(browser, f, control), Contains("data-pwned=\"control\""));
  // The report: neither payload ran.
  const std::string dom = rendered_dom(browser, f, html);
  CHECK_THAT(dom, Contains("</html>"));
  CHECK_THAT(dom, !Contains("data-pwned=\""));
}

// --- Issue 20, hostile input: what reaches a Slurm batch script, and names ---

TEST_CASE("security: a line break in a value never reaches the batch script", "[cli][security][submit]") {
  CliFixture f;
  const std::string toml = tiny_experiment("t", "steps = 2\neval = false");
  f.write_experiment("t.toml", toml);
  // Each would end its #SBATCH line (or the comment that names the results
  // folder) and run `touch PWNED` as a command of the job.
  const std::string payload = "gpu\ntouch PWNED #";
  for (const std::string option : {"--partition", "--mem", "--time", "--results"}) {
    const auto r = f.xrun("submit t.toml --slurm --dry-run " + option + " " + shell_quote(payload));
    INFO(option << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("xrun submit: " + option + " \"") &&
                             Contains("gpu\\u000Atouch PWNED #\" holds a control character "
                                      "(\\u000A, a line break)"));
    CHECK_THAT(r.output, !Contains("#SBATCH") && !Contains("\ntouch PWNED"));
  }
  // A carriage return or a tab is refused as well; a quote is quoted.
  CHECK(f.xrun("submit t.toml --slurm --dry-run --mem " + shell_quote("16G\r")).status == 2);
  CHECK(f.xrun("submit t.toml --slurm --dry-run --time " + shell_quote("1:00\t")).status == 2);
  const auto quoted = f.xrun("submit t.toml --slurm --dry-run --partition " + shell_quote("gpu' x"));
  CHECK(quoted.status == 0);
  CHECK_THAT(quoted.output, Contains("#SBATCH --partition='gpu'\\'' x'\n"));

  // A working directory whose name holds a line break (the --chdir line).
  const std::string dir = f.dir.file("a\ntouch PWNED #");
  std::filesystem::create_directories(dir);
  xrun_test::write_bytes(dir + "/t.toml", toml);
  const auto r = xrun_test::run_command("cd " + shell_quote(dir) + " && " +
                                        shell_quote(xrun_test::xrun_binary()) +
                                        " submit t.toml --slurm --dry-run");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("the working directory (the job's --chdir) ") &&
                           Contains("holds a control character (\\u000A, a line break)"));
  CHECK_THAT(r.output, !Contains("#SBATCH"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("PWNED")));
  CHECK_FALSE(std::filesystem::exists(dir + "/PWNED"));
}

TEST_CASE("security: an experiment name is one folder name, for every command", "[cli][security][submit]") {
  CliFixture f;
  // `xrun submit` puts its results in xrun-results/NAME: each of these
  // would put them (logs, script, frozen copy, jobs.tsv) elsewhere.
  for (const std::string name : {"../x", "../../x", "/tmp/x", "a/b", "..", ".", "x/..", "a..b"}) {
    INFO(name);
    const std::string file =
        f.write_experiment("n.toml", tiny_experiment(name, "steps = 2\neval = false"));
    bool refused = true;
    for (const std::string& command :
         std::vector<std::string>{"plan n.toml", "run n.toml --db " + shell_quote(f.db()),
                                  "submit n.toml --slurm --dry-run", "submit n.toml --slurm"}) {
      // A submission that would write is only tried once the dry run was
      // refused: a build without the rule must not write outside the test.
      if (!refused) break;
      const auto r = f.xrun(command);
      INFO(command << "\n" << r.output);
      refused = r.status == 2;
      CHECK(r.status == 2);
      CHECK_THAT(r.output, Contains("name: expected a non-empty name") &&
                               Contains("usable as one folder name (no '/' or '..', not '.')") &&
                               Contains("n.toml:1"));
    }
  }
  // --set name=... meets the same rule.
  f.write_experiment("ok.toml", tiny_experiment("ok", "steps = 2\neval = false"));
  CHECK(f.xrun("plan ok.toml --set 'name=\"../x\"'").status == 2);
  // Nothing was written anywhere: no results folder, no store, nothing beside.
  CHECK_FALSE(std::filesystem::exists(f.dir.file("x")));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("xrun-results")));
  CHECK_FALSE(std::filesystem::exists(f.db()));
  // Names that are one folder name still plan.
  for (const std::string name : {"resnet-50_sweep v2", "a.b", ".hidden", "Grafikkarte-Ü"}) {
    f.write_experiment("good.toml", tiny_experiment(name, "steps = 2\neval = false"));
    const auto r = f.xrun("plan good.toml");
    INFO(name << "\n" << r.output);
    CHECK(r.status == 0);
  }
}
