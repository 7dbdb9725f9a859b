// tests/config/hash_test.cpp: canonical serialisation and the two hashes:
// stable across file layout and spelling; which fields change which hash.
#include "catch2_compat.h"

#include "helpers.h"
#include "runner/config_schema.h"

using namespace xrun;
using namespace xrun::test;

TEST_CASE("FNV-1a 64 known values", "[config][hash]") {
  CHECK(fnv1a_hex("") == "cbf29ce484222325");
  CHECK(fnv1a_hex("a") == "af63dc4c8601ec8c");
  CHECK(fnv1a_hex("foobar") == "85944171f73967e8");
  CHECK(short_hash("85944171f73967e8") == "85944171");
}

TEST_CASE("canonical text: sorted keys, compact, ints stay ints", "[config][hash]") {
  nlohmann::json j = {{"b", 1}, {"a", {{"y", 0.5}, {"x", "s"}}}, {"c", 2.0}};
  CHECK(canonical_json(j) == R"({"a":{"x":"s","y":0.5},"b":1,"c":2.0})");
  RunSpec r = plan_text("name = \"c\"\n").runs[0];
  CHECK(r.canonical == canonical_json(r.config));
  CHECK(r.canonical.find("\"batch_size\":32,") != std::string::npos);
  CHECK(r.canonical.find("\"lr\":0.001,") != std::string::npos);
  CHECK(r.params.at("train.batch_size") == "32");
  CHECK(r.params.at("train.precision") == "\"fp32\"");
  CHECK(r.params.at("train.optimizer.betas") == "[0.9,0.999]");
  CHECK(r.params.at("store.label") == "\"testhost\"");
  size_t run_keys = 0;
  for (auto& k : schema::keys()) run_keys += k.run_setting;
  CHECK(r.params.size() == run_keys);
}

TEST_CASE("same settings, different layout: same hashes", "[config][hash]") {
  const std::string a = R"(
name = "h"
[train]
batch_size = 512
precision = "fp16"
device = "cuda:0"
[train.optimizer]
lr = 1e-3
)";
  const std::string b = R"(
# the same experiment, written differently
name = "h"
description = "described"
model.arch = "resnet50"           # the default, written out
[train.optimizer]
lr = 0.001
name = "adamw"
weight_decay = 0.01               # the adamw default, written out
[data]
source = "synthetic"
mean = [0.5, 0.5, 0.5]
[train]
precision = "fp16"
device = "cuda:0"
batch_size = 512
)";
  RunSpec ra = plan_text(a).runs[0], rb = plan_text(b).runs[0];
  CHECK(ra.config_hash == rb.config_hash);
  CHECK(ra.experiment_hash == rb.experiment_hash);
  // And the same run from a --set gives the same hash.
  PlanOptions o = cpu_options();
  o.sets = {"train.batch_size=512", "train.precision=fp16", "train.device=cuda:0"};
  CHECK(plan_text("name = \"h\"\n", o).runs[0].config_hash == ra.config_hash);
  // A swept value gives the same hash as the value written plainly.
  Plan swept = plan_text("name = \"h\"\n[train]\nprecision = \"fp16\"\ndevice = \"cuda:0\"\n"
                         "[sweep]\ntrain.batch_size = [256, 512]\n");
  CHECK(swept.runs[1].config_hash == ra.config_hash);
}

TEST_CASE("which fields change which hash", "[config][hash]") {
  const std::string base = "name = \"h\"\n";
  auto run = [&](std::vector<std::string> sets, bool gpu = false) {
    PlanOptions o = gpu ? gpu_options() : cpu_options();
    o.sets = std::move(sets);
    return plan_text(base, o).runs[0];
  };
  RunSpec ref = run({});
  SECTION("description and store.path change neither") {
    for (auto s : {"description=\"other\"", "store.path=other.db"}) {
      RunSpec r = run({s});
      CHECK(r.config_hash == ref.config_hash);
      CHECK(r.experiment_hash == ref.experiment_hash);
      CHECK(r.canonical != ref.canonical);
    }
  }
  SECTION("device and label change config_hash only") {
    for (auto r : {run({"train.device=cuda:0"}), run({"store.label=other-box"}), run({}, true)}) {
      CHECK(r.config_hash != ref.config_hash);
      CHECK(r.experiment_hash == ref.experiment_hash);
    }
    // data.path too: the same data may live elsewhere on another machine.
    RunSpec r = run({"data.path=/elsewhere"});
    CHECK(r.config_hash != ref.config_hash);
    CHECK(r.experiment_hash == ref.experiment_hash);
  }
  SECTION("run settings change both") {
    for (auto s : {"train.batch_size=64", "name=\"other\"", "train.optimizer.lr=0.01", "data.augment=[\"hflip\"]",
                   "train.cudnn_benchmark=true", "measure.warmup_steps=2", "profile.nvtx=false", "train.seed=1"}) {
      INFO(s);
      RunSpec r = run({s});
      CHECK(r.config_hash != ref.config_hash);
      CHECK(r.experiment_hash != ref.experiment_hash);
    }
  }
  SECTION("batch_size 32 given explicitly is the default's hash") {
    CHECK(run({"train.batch_size=32"}).config_hash == ref.config_hash);
  }
}

TEST_CASE("hash values are pinned (a change here breaks stored results)", "[config][hash]") {
  // The canonical text of a fixed config must not drift between versions:
  // if this fails, the resolved config changed shape and old results no
  // longer match new plans. Update deliberately.
  RunSpec r = plan_text("name = \"pin\"\n[store]\nlabel = \"box\"\n").runs[0];
  CHECK(r.config_hash == fnv1a_hex(canonical_json([&] {
          auto c = r.config;
          c.erase("description");
          c["store"].erase("path");
          c["train"].erase("per_layer_update");  // added later: hashed only when set
          c["train"].erase("eval_every");
          c["train"]["optimizer"].erase("lr_scaling");
          c["train"]["optimizer"].erase("reference_batch");
          c["measure"].erase("target_accuracy");
          c["train"].erase("ranks");
          c.erase("distributed");
          for (const char* k : {"layers", "heads", "width", "context", "vocab"})  // GPT-2's shape
            c["model"].erase(k);
          c["data"].erase("sequence_length");
          c["train"].erase("clip_grad_norm");
          return c;
        }())));
  CHECK(r.config_hash == "1421229ed1977e38");
  CHECK(r.experiment_hash == "29310b94599743c2");
}

TEST_CASE("a key added to the schema later keeps earlier hashes at its default", "[config][hash]") {
  const std::string text = "name = \"pin\"\n[store]\nlabel = \"box\"\n";
  const RunSpec plain = plan_text(text).runs[0];
  REQUIRE(plain.config["train"].contains("per_layer_update"));
  const RunSpec at_default = plan_text(text + "[train]\nper_layer_update = false\n").runs[0];
  CHECK(at_default.config_hash == plain.config_hash);
  CHECK(at_default.config_hash == "1421229ed1977e38");
  const RunSpec set = plan_text(text + "[train]\nper_layer_update = true\n").runs[0];
  CHECK(set.config_hash != plain.config_hash);
  CHECK(set.experiment_hash != plain.experiment_hash);
  // The time-to-target and learning-rate scaling keys (schema of issue 23).
  const RunSpec later_defaults =
      plan_text(text + "[train]\neval_every = 0\nclip_grad_norm = 0\n[train.optimizer]\nlr_scaling = \"none\"\n"
                       "reference_batch = 256\n[measure]\ntarget_accuracy = 0\n"
                       "[distributed]\nbackend = \"auto\"\ntimeout_s = 120\nbucket_mb = 25\n")
          .runs[0];
  CHECK(later_defaults.config_hash == "1421229ed1977e38");
  for (const std::string extra : {"[train]\neval_every = 100\n", "[measure]\ntarget_accuracy = 0.9\n",
                                  "[train.optimizer]\nlr_scaling = \"linear\"\n",
                                  "[train.optimizer]\nreference_batch = 128\n",
                                  "[train]\nranks = 2\n", "[distributed]\nbackend = \"gloo\"\n",
                                  "[distributed]\ntimeout_s = 30\n", "[distributed]\nbucket_mb = 0\n",
                                  "[train]\nclip_grad_norm = 1\n"}) {
    INFO(extra);
    CHECK(plan_text(text + extra).runs[0].config_hash != plain.config_hash);
  }
}
