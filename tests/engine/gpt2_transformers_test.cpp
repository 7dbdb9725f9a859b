// tests/engine/gpt2_transformers_test.cpp: an xrun GPT-2 checkpoint through
// Hugging Face transformers and back (issue #25): GPT2LMHeadModel loads it
// (only the tied lm_head.weight missing), computes the loss of the batch
// xrun trains on next within 1e-5 of xrun's own, and writes its state_dict
// (lm_head.weight included) which xrun starts from, bit for bit. Needs a
// Python with torch and transformers (XRUN_TORCH_PYTHON, or
// bench/cpu_vs_pytorch.sh's venv ~/.cache/xrun/pypi-torch): skipped, with
// the reason printed, where there is none (CI stays free of torch).
#include "catch2_compat.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/trainer.h"
#include "skip.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;

namespace {

std::string torch_python() {
  if (const char* p = std::getenv("XRUN_TORCH_PYTHON"); p && *p) return p;
  const char* home = std::getenv("HOME");
  const std::string venv = std::string(home ? home : "") + "/.cache/xrun/pypi-torch/bin/python";
  if (std::filesystem::exists(venv) &&
      xrun_test::run_command(venv + " -c 'import torch, transformers' 2>/dev/null").status == 0)
    return venv;
  return "";
}

// The shared small GPT-2 in file order (no shuffling), no evaluation.
RunConfig tiny(const std::string& text, int64_t steps) {
  RunConfig c = xrun_test::tiny_gpt2(text, steps);
  c.name = "gpt2-hf";
  c.data.shuffle = false;
  c.train.eval = false;
  c.train.seed = 11;
  c.measure.warmup_steps = 0;
  return c;
}

}  // namespace

TEST_CASE("gpt2: a checkpoint goes through transformers' GPT2LMHeadModel and back",
          "[gpt2][transformers]") {
  const std::string py = torch_python();
  if (py.empty())
    XRUN_SKIP("no Python with torch and transformers (set XRUN_TORCH_PYTHON, or run "
              "bench/cpu_vs_pytorch.sh once to make ~/.cache/xrun/pypi-torch)");
  xrun_test::ScratchDir dir;
  std::string text;
  for (int i = 0; i < 30; ++i) text += "pack my box with five dozen liquor jugs; ";
  xrun_test::write_bytes(dir.file("t.txt"), text);

  // Three steps of training, then the weights.
  RunConfig a = tiny(dir.file("t.txt"), 3);
  a.train.checkpoint = dir.file("xrun.safetensors");
  xrun_test::RunWatch quiet;
  train(a, quiet);

  // transformers: load, the loss of batch 0 (no shuffle: windows 0..3 of
  // 8 bytes, targets one on), and its state_dict written whole.
  const std::string script = R"(
import sys, torch, transformers
from safetensors.torch import load_file, save_file
ckpt, text, out = sys.argv[1:4]
cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=16, vocab_size=256,
                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
m = transformers.GPT2LMHeadModel(cfg)
missing, unexpected = m.load_state_dict(load_file(ckpt), strict=False)
assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
m.tie_weights()
m.eval()
data = open(text, "rb").read()
rows = [list(data[w * 8: w * 8 + 9]) for w in range(4)]
x = torch.tensor([r[:8] for r in rows]); y = torch.tensor([r[1:] for r in rows])
with torch.no_grad():
    logits = m(input_ids=x).logits.double()
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
print(repr(loss.item()))
save_file({k: v.contiguous().clone() for k, v in m.state_dict().items()}, out)
)";
  xrun_test::write_bytes(dir.file("hf.py"), script);
  const auto r = xrun_test::run_command(py + " " + dir.file("hf.py") + " " +
                                        dir.file("xrun.safetensors") + " " + dir.file("t.txt") +
                                        " " + dir.file("hf.safetensors") + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::istringstream lines(r.output);
  double hf_loss = 0;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.find_first_not_of("0123456789.e-") == std::string::npos)
      hf_loss = std::stod(line);
  REQUIRE(hf_loss > 0);

  // xrun from transformers' file (lm_head.weight in it), learning rate 0:
  // its first step's loss is that batch's, and the weights stay as they were.
  RunConfig b = tiny(dir.file("t.txt"), 1);
  b.model.weights = dir.file("hf.safetensors");
  b.train.optimizer.lr = 0;
  b.train.checkpoint = dir.file("back.safetensors");
  xrun_test::RunWatch watch;
  train(b, watch);
  REQUIRE(watch.steps.size() == 1);
  CHECK(watch.steps[0].loss == Approx(hf_loss).epsilon(1e-5));
  CHECK(xrun_test::tensor_bytes(b.train.checkpoint) == xrun_test::tensor_bytes(a.train.checkpoint));
}
