// tests/config/gpt2_resolve_test.cpp: how a GPT-2 run resolves (issue #25):
// the preset's shape where no key is given, the text source's 256-byte
// vocabulary, the sequence length from the context, the classes from the
// vocabulary, and every rule that refuses a run before it starts (a shape
// that cannot be built, a ResNet given GPT-2 keys or token data, bf16 on a
// CPU without bf16 kernels, clipping with per-layer updates or CUDA graphs),
// and that a GPU takes it in every precision and an AMX CPU in bf16.
#include "catch2_compat.h"

#include "helpers.h"

using namespace xrun;
using namespace xrun::test;
using nlohmann::json;

namespace {
json resolved(const std::string& toml, PlanOptions o = cpu_options()) {
  return plan_text(toml, o).runs.at(0).config;
}
const std::string kGpt2 = "name = \"g\"\n[model]\narch = \"gpt2\"\n";
}  // namespace

TEST_CASE("gpt2: a preset fills the shape, the keys given override it", "[config][gpt2]") {
  json c = resolved(kGpt2);
  CHECK(c["model"]["layers"] == 12);
  CHECK(c["model"]["heads"] == 12);
  CHECK(c["model"]["width"] == 768);
  CHECK(c["model"]["context"] == 1024);
  CHECK(c["model"]["vocab"] == 50257);
  CHECK(c["model"]["num_classes"] == 50257);
  CHECK(c["data"]["sequence_length"] == 1024);
  c = resolved("name = \"g\"\n[model]\narch = \"gpt2-medium\"\n");
  CHECK(c["model"]["layers"] == 24);
  CHECK(c["model"]["heads"] == 16);
  CHECK(c["model"]["width"] == 1024);
  c = resolved(kGpt2 + "layers = 2\nheads = 2\nwidth = 32\ncontext = 16\nvocab = 64\n"
                       "[data]\nsequence_length = 8\n");
  CHECK(c["model"]["layers"] == 2);
  CHECK(c["model"]["width"] == 32);
  CHECK(c["model"]["num_classes"] == 64);
  CHECK(c["data"]["sequence_length"] == 8);
  const RunConfig r = to_run_config(c);
  CHECK(r.model.is_gpt2());
  CHECK(r.model.vocab == 64);
  CHECK(r.data.sequence_length == 8);
}

TEST_CASE("gpt2: text data is bytes, its vocabulary 256, and a ResNet has no GPT-2 shape",
          "[config][gpt2]") {
  json c = resolved(kGpt2 + "[data]\nsource = \"text\"\n");
  CHECK(c["model"]["vocab"] == 256);
  CHECK(c["data"]["path"] == "/usr/share/games/fortunes/literature");
  c = resolved("name = \"r\"\n");
  for (const char* k : {"layers", "heads", "width", "context", "vocab"}) CHECK(c["model"][k] == 0);
  CHECK(c["data"]["sequence_length"] == 0);
  CHECK_FALSE(to_run_config(c).model.is_gpt2());
}

TEST_CASE("gpt2: shapes and pairings that cannot train are refused where they are written",
          "[config][gpt2]") {
  const auto refused = [](const std::string& toml, const std::string& key, const std::string& says,
                          PlanOptions o = cpu_options()) {
    INFO(toml);
    const ExperimentError e = error_of(toml, o);
    CHECK(e.key == key);
    CHECK_THAT(e.what(), Catch::Contains(says));
  };
  refused(kGpt2 + "heads = 5\n", "model.heads", "not a multiple of heads 5");
  refused(kGpt2 + "context = 16\n[data]\nsequence_length = 17\n", "data.sequence_length",
          "at most model.context (16 positions)");
  refused(kGpt2 + "vocab = 100\n[data]\nsource = \"text\"\n", "model.vocab",
          "must hold all 256");
  refused(kGpt2 + "num_classes = 10\n", "model.num_classes", "leave num_classes out");
  refused(kGpt2 + "[data]\nsource = \"cifar10\"\n", "data.source", "GPT-2 trains on tokens");
  refused(kGpt2 + "[data]\naugment = [\"hflip\"]\n", "data.augment", "token windows");
  refused("name = \"r\"\n[model]\nlayers = 2\n", "model.layers", "a GPT-2 key");
  refused("name = \"r\"\n[data]\nsource = \"text\"\n", "data.source", "feeds a language model");
  // bf16 on the CPU as for ResNet: where oneDNN has bf16 kernels.
  refused(kGpt2 + "[train]\nprecision = \"bf16\"\n", "train.precision", "bf16");
  refused("name = \"r\"\n[train]\nclip_grad_norm = 1.0\nper_layer_update = true\n",
          "train.clip_grad_norm", "not with train.per_layer_update");
  refused("name = \"r\"\n[train]\nclip_grad_norm = 1.0\ndevice = \"cuda:0\"\ncuda_graphs = true\n",
          "train.clip_grad_norm", "not with train.cuda_graphs", gpu_options());
}

TEST_CASE("gpt2 resolve: bf16 on a CPU with bf16 kernels", "[config][gpt2]") {
  PlanOptions o = cpu_options();
  o.cpu_bf16_kernels = "amx";
  const json r = resolved(kGpt2 + "[train]\nprecision = \"bf16\"\n", o);
  CHECK(r["train"]["device"] == "cpu");
  CHECK(r["train"]["precision"] == "bf16");
}

TEST_CASE("gpt2 resolve: on a GPU in every precision, clipped on the device", "[config][gpt2]") {
  for (const char* precision : {"fp32", "tf32", "fp16", "bf16"}) {
    const json r = resolved(kGpt2 + "[train]\ndevice = \"cuda:0\"\nclip_grad_norm = 1.0\n"
                                    "precision = \"" + precision + "\"\n",
                            gpu_options());
    CHECK(r["train"]["device"] == "cuda:0");
    CHECK(r["train"]["precision"] == precision);
    CHECK(r["train"]["clip_grad_norm"] == 1.0);
  }
}
