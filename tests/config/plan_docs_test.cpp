// tests/config/plan_docs_test.cpp: `plan` output (table and JSON) and the
// key reference in docs/experiment-format.md matching the schema.
#include "catch2_compat.h"

#include <fstream>
#include <sstream>

#include "helpers.h"

using namespace xrun;
using namespace xrun::test;

TEST_CASE("the docs' key reference is schema_markdown()", "[config][docs]") {
  std::ifstream in(source_path("docs/experiment-format.md"));
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN KEY REFERENCE", end = "<!-- END KEY REFERENCE -->";
  auto b = doc.find(begin), e = doc.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  b = doc.find('\n', b) + 1;
  std::string section = doc.substr(b, e - b);
  while (!section.empty() && (section.front() == '\n')) section.erase(0, 1);
  while (!section.empty() && (section.back() == '\n')) section.pop_back();
  std::string md = schema_markdown();
  while (!md.empty() && md.back() == '\n') md.pop_back();
  // On failure: regenerate the section with `xrun keys`.
  CHECK(section == md);
}

TEST_CASE("the key reference lists every key", "[config][docs]") {
  const std::string md = schema_markdown();
  for (auto k : {"`name`", "`train.batch_size`", "`train.optimizer.betas`", "`sweep.mode`", "`store.label`",
                 "`data.test_samples`", "`profile.trace_steps`"})
    CHECK_THAT(md, Catch::Contains(k));
}

TEST_CASE("plan table: header, one line per run, count", "[config][plan]") {
  PlanOptions o = gpu_options();
  o.sets = {"train.seed=3"};
  Plan p = plan_text(R"(
name = "tbl"
description = "a table"
[train]
device = "cuda:0"
[sweep]
train.batch_size = [16, "auto"]
train.optimizer.name = ["adamw", "sgd"]
train.seed = [1, 2]
)", o);
  const std::string t = format_plan(p, false);
  INFO(t);
  CHECK_THAT(t, Catch::Contains("experiment: tbl  (t.toml)"));
  CHECK_THAT(t, Catch::Contains("sweep: grid over train.batch_size (2) x train.optimizer.name (2)"));
  CHECK_THAT(t, Catch::Contains("device: cuda:0  label: testhost"));
  CHECK_THAT(t, Catch::Contains("note: --set train.seed=3 fixes train.seed"));
  for (auto& r : p.runs) {
    std::string swept;
    for (auto& [k, v] : r.swept) swept += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    CHECK_THAT(t, Catch::Contains("  #" + std::to_string(r.index) + "  " + short_hash(r.config_hash) + " " + swept + "\n"));
  }
  CHECK_THAT(t, Catch::Contains("#3  " + short_hash(p.runs[3].config_hash) +
                                "  train.batch_size=auto train.optimizer.name=sgd\n"));
  CHECK(t.size() >= 7);
  CHECK(t.substr(t.size() - 7) == "4 runs\n");
  CHECK(format_plan(plan_text("name = \"one\"\n"), false).find("\n1 run\n") != std::string::npos);
}

TEST_CASE("plan json parses and carries every run", "[config][plan]") {
  Plan p = plan_text("name = \"js\"\n[sweep]\nmode = \"zip\"\ntrain.seed = [1, 2, 3]\ntrain.threads = [1, 2, 4]\n");
  auto j = nlohmann::json::parse(format_plan(p, true));
  CHECK(j["experiment"] == "js");
  CHECK(j["file"] == "t.toml");
  CHECK(j["mode"] == "zip");
  CHECK(j["axes"] == nlohmann::json::array({"train.seed", "train.threads"}));
  CHECK(j["count"] == 3);
  REQUIRE(j["runs"].size() == 3);
  CHECK(j["runs"][2]["index"] == 2);
  CHECK(j["runs"][2]["swept"]["train.threads"] == 4);
  CHECK(j["runs"][2]["config_hash"] == p.runs[2].config_hash);
  CHECK(j["runs"][2]["experiment_hash"] == p.runs[2].experiment_hash);
  CHECK(j["runs"][2]["config"] == p.runs[2].config);
}
