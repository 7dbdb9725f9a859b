// runner/config_schema.cpp: the table of every experiment key and the checks
// it drives: type and range checks of a TOML value, "did you mean" for
// unknown keys, and the Markdown key reference. To add a key: one line in
// keys() below, the field in core/config.h, and its line in
// to_run_config (runner/run_config.cpp); validation and docs follow.
#include "runner/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace xrun::schema {

namespace {

using nlohmann::json;

KeySpec K(const char* key, KeyType type, const char* doc) {
  KeySpec s;
  s.key = key;
  s.type = type;
  s.doc = doc;
  return s;
}

// train.device: "auto", "cpu", "cuda" or "cuda:N".
std::string check_device(const std::string& v) {
  if (v == "auto" || v == "cpu" || v == "cuda") return "";
  if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.size() <= 8 &&
      std::all_of(v.begin() + 5, v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "";
  return "\"auto\", \"cpu\", \"cuda\" or \"cuda:N\"";
}

// name: one printable line that is also one safe folder name: results go
// to xrun-results/NAME (`xrun submit`), so no '/' and no '..'.
std::string check_name(const std::string& v) {
  bool ok = !v.empty() && v != "." && v.front() != ' ' && v.back() != ' ' &&
            v.find('/') == std::string::npos && v.find("..") == std::string::npos &&
            std::none_of(v.begin(), v.end(), [](char c) { return c >= 0 && c < 0x20; });
  return ok ? ""
            : "a non-empty name on one line, without leading or trailing spaces, usable as "
              "one folder name (no '/' or '..', not '.')";
}

std::vector<KeySpec> build_keys() {
  using T = KeyType;
  const json kNoList = json::array();
  std::vector<KeySpec> k;
  // --- top level ---
  k.push_back(K("name", T::string, "Experiment name; results are grouped under it.")
                  .must().fixed()
                  .rule("non-empty, one folder name (no `/` or `..`, not `.`)", check_name)
                  .max_len(128));
  k.push_back(K("description", T::string, "Free text, shown by `plan`; not part of any hash.")
                  .def("").fixed().free_text());
  // --- [model] ---
  k.push_back(K("model.arch", T::choice, "ResNet depth (torchvision layer shapes and names), or a GPT-2 preset (transformers' GPT2LMHeadModel shapes and names).")
                  .one_of({"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "gpt2",
                           "gpt2-medium", "gpt2-large", "gpt2-xl"})
                  .def("resnet50"));
  k.push_back(K("model.num_classes", T::integer, "Classifier outputs; at least the data's classes (GPT-2: its vocabulary).")
                  .dep("the data's classes; GPT-2: model.vocab").at_least(2).at_most(100000));
  k.push_back(K("model.layers", T::integer, "GPT-2: transformer blocks (n_layer).")
                  .dep("the preset's (gpt2 12); 0 for ResNet").at_least(0).at_most(1024));
  k.push_back(K("model.heads", T::integer, "GPT-2: attention heads (n_head); width must be a multiple.")
                  .dep("the preset's (gpt2 12); 0 for ResNet").at_least(0).at_most(1024));
  k.push_back(K("model.width", T::integer, "GPT-2: embedding width (n_embd).")
                  .dep("the preset's (gpt2 768); 0 for ResNet").at_least(0).at_most(65536));
  k.push_back(K("model.context", T::integer, "GPT-2: positions (n_positions), the longest sequence.")
                  .dep("the preset's (gpt2 1024); 0 for ResNet").at_least(0).at_most(65536));
  k.push_back(K("model.vocab", T::integer, "GPT-2: vocabulary (vocab_size); every token below it.")
                  .dep("the preset's (50257); text data 256; 0 for ResNet").at_least(0).at_most(100000));
  k.push_back(K("model.weights", T::string, "Safetensors file to start from; \"\" = fresh init.")
                  .def(""));
  // --- [data] ---
  k.push_back(K("data.source", T::choice, "Dataset format: CIFAR-10 binary, IDX (MNIST family), or generated; GPT-2: llm.c token files, UTF-8 text (bytes), or generated tokens.")
                  .one_of({"cifar10", "idx", "synthetic", "tokens", "text"}).def("synthetic"));
  k.push_back(K("data.path", T::string, "Directory of the dataset files (tokens, text: a file or a folder).")
                  .dep("the source's: cifar10 `data/cifar-10-batches-bin`, idx "
                       "`/usr/share/datasets/fashion-mnist`, tokens `data/tokens`, text "
                       "`/usr/share/games/fortunes/literature` (Debian's fortunes-min), synthetic `\"\"`"));
  k.push_back(K("data.sequence_length", T::integer, "GPT-2: tokens per training sequence (T), at most model.context.")
                  .dep("model.context; 0 for ResNet").at_least(0).at_most(65536));
  k.push_back(K("data.image_size", T::integer, "Images are placed or resized to this square size.")
                  .dep("the source's: 32 (cifar10, synthetic), 28 (idx)").at_least(8).at_most(1024));
  k.push_back(K("data.channels", T::integer, "Model input channels (gray is replicated).")
                  .dep("the source's: 3 (cifar10, synthetic), 1 (idx)").at_least(1).at_most(4));
  k.push_back(K("data.num_classes", T::integer, "Classes of synthetic data (other sources: their own).")
                  .dep("the source's: 10").at_least(2).at_most(100000));
  k.push_back(K("data.mean", T::number_list, "Per-channel mean subtracted after scaling to [0, 1].")
                  .dep("the source's statistics, one per channel"));
  k.push_back(K("data.std", T::number_list, "Per-channel standard deviation divided by.")
                  .dep("the source's statistics, one per channel")
                  .at_least(1e-6));  // pixels are divided by it: 1e-45 made them inf, the loss NaN
  k.push_back(K("data.augment", T::choice_list, "Training augmentations: 4-pixel pad + random crop, horizontal flip.")
                  .one_of({"random_crop", "hflip"}).def(kNoList));
  k.push_back(K("data.shuffle", T::boolean, "Shuffle the training set every epoch.").def(true));
  k.push_back(K("data.workers", T::integer, "Loader threads; 0 = load on the training thread.")
                  .def(2).at_least(0).at_most(256));
  k.push_back(K("data.pin_memory", T::boolean, "Stage batches in pinned host memory; on CUDA the next batch is copied on its own stream while the current step computes (with prefetch >= 2 and accumulate = 1). No effect on the CPU.").def(false));
  k.push_back(K("data.prefetch", T::integer, "Batches prepared ahead (ring size).")
                  .def(2).at_least(1).at_most(64));
  k.push_back(K("data.limit", T::integer, "Use at most this many training samples; 0 = all.")
                  .def(0).at_least(0));
  k.push_back(K("data.test_limit", T::integer, "Use at most this many test samples; 0 = all.")
                  .def(0).at_least(0));
  k.push_back(K("data.learnable", T::boolean, "Synthetic: class-dependent patterns (false: pure noise).")
                  .def(true));
  k.push_back(K("data.samples", T::integer, "Synthetic: training-set size (GPT-2: sequences).").def(50000).at_least(1));
  k.push_back(K("data.test_samples", T::integer, "Synthetic: test-set size (GPT-2: sequences).").def(10000).at_least(1));
  // --- [train] ---
  k.push_back(K("train.device", T::string, "Where to train; \"auto\" = cuda:0 when a GPU is present, else cpu.")
                  .def("auto").rule("`\"auto\"`, `\"cpu\"`, `\"cuda\"`, `\"cuda:N\"`", check_device));
  k.push_back(K("train.batch_size", T::integer_or_auto, "Images per step; \"auto\" (GPU) = the largest multiple of 8 whose memory plan fits.")
                  .def(32).at_least(1).at_most(65536));
  k.push_back(K("train.memory_fraction", T::number, "batch_size = \"auto\": share of device memory to fill.")
                  .def(0.9).above(0).at_most(1));
  k.push_back(K("train.clip_grad_norm", T::number, "Scale the gradients down to this global L2 norm when above it (torch.nn.utils.clip_grad_norm_); 0 = off. Not with per_layer_update or cuda_graphs.")
                  .def(0).at_least(0));
  k.push_back(K("train.accumulate", T::integer, "Micro-batches per optimizer step (gradient accumulation).")
                  .def(1).at_least(1).at_most(1024));
  k.push_back(K("train.epochs", T::integer, "Passes over the training set; excludes train.steps.")
                  .dep("1 when neither epochs nor steps is given and measure.measure_steps = 0, else 0")
                  .at_least(1).at_most(1000000));
  k.push_back(K("train.steps", T::integer, "Optimizer steps to run; excludes train.epochs.")
                  .dep("measure.warmup_steps + measure.measure_steps when neither is given and "
                       "measure_steps > 0, else 0")
                  .at_least(1).at_most(1e12));
  k.push_back(K("train.precision", T::choice, "fp32 (no TF32), tf32, fp16 (loss scaling), bf16.")
                  .one_of({"fp32", "tf32", "fp16", "bf16"}).def("fp32"));
  k.push_back(K("train.cudnn_benchmark", T::boolean_or_cached,
                "cuDNN algorithm choice: heuristic, timed, or timed with earlier choices reused.")
                  .def(false));
  k.push_back(K("train.cuda_graphs", T::boolean, "Record the step in a CUDA graph after warmup and replay it (needs accumulate = 1).").def(false));
  k.push_back(K("train.per_layer_update", T::boolean, "CPU: update each layer's parameters in the backward pass as soon as their gradients are complete (bit-identical weights; measured no faster, see bench/README.md; not with accumulate > 1 or fp16). CUDA updates all at once after the backward pass.").def(false));
  k.push_back(K("train.seed", T::integer, "Seed for init, shuffling and augmentation.").def(0).at_least(0));
  k.push_back(K("train.threads", T::integer, "CPU threads for compute; 0 = all cores.")
                  .def(0).at_least(0).at_most(1024));
  k.push_back(K("train.eval", T::boolean, "Evaluate on the test split after each epoch.").def(true));
  k.push_back(K("train.eval_every", T::integer, "Also evaluate every this many steps (for the time to measure.target_accuracy); 0 = at epoch ends only.")
                  .def(0).at_least(0).at_most(1e12));
  k.push_back(K("train.checkpoint", T::string, "Safetensors file written at the end; \"\" = none.").def(""));
  k.push_back(K("train.resume", T::boolean, "Continue from train.checkpoint if it exists.").def(false));
  k.push_back(K("train.log_every", T::integer, "Steps between loss read-backs and progress lines.")
                  .def(10).at_least(1).at_most(1000000));
  k.push_back(K("train.ranks", T::integer, "Processes training this run together (data parallel): each its own GPU or share of the CPU cores, each batch_size images per micro-batch, gradients averaged.")
                  .def(1).at_least(1).at_most(1024));
  // --- [train.optimizer] ---
  k.push_back(K("train.optimizer.name", T::choice, "Optimizer.").one_of({"adamw", "sgd"}).def("adamw"));
  k.push_back(K("train.optimizer.lr", T::number, "Peak learning rate.").def(1e-3).above(0));
  k.push_back(K("train.optimizer.weight_decay", T::number, "Decoupled (adamw) or L2 (sgd) weight decay.")
                  .dep("0.01 for adamw, 0 for sgd").at_least(0));
  k.push_back(K("train.optimizer.betas", T::number_list, "AdamW moment decay rates.")
                  .def(json::array({0.9, 0.999})).len(2).at_least(0).below(1));
  k.push_back(K("train.optimizer.eps", T::number, "AdamW denominator term.").def(1e-8).above(0));
  k.push_back(K("train.optimizer.momentum", T::number, "SGD momentum.").def(0.0).at_least(0).below(1));
  k.push_back(K("train.optimizer.nesterov", T::boolean, "SGD Nesterov momentum (needs momentum > 0).")
                  .def(false));
  k.push_back(K("train.optimizer.lr_scaling", T::choice, "Scale lr (the rate at reference_batch) to the run's batch x accumulate: none, linear (Goyal et al. 2017, with schedule warmup) or sqrt. The scaled rate is the run's (runs.lr, steps.lr).")
                  .one_of({"none", "linear", "sqrt"}).def("none"));
  k.push_back(K("train.optimizer.reference_batch", T::integer, "lr_scaling: the images per step that lr is given for.")
                  .def(256).at_least(1).at_most(1e9));
  // --- [train.schedule] ---
  k.push_back(K("train.schedule.name", T::choice, "Learning-rate schedule after warmup.")
                  .one_of({"constant", "cosine", "step"}).def("constant"));
  k.push_back(K("train.schedule.warmup_steps", T::integer, "Linear warmup steps.").def(0).at_least(0));
  k.push_back(K("train.schedule.min_lr", T::number, "cosine: learning rate at the last step.")
                  .def(0.0).at_least(0));
  k.push_back(K("train.schedule.step_size", T::integer, "step: decay every this many steps.")
                  .def(1000).at_least(1));
  k.push_back(K("train.schedule.gamma", T::number, "step: decay factor.").def(0.1).above(0).at_most(1));
  // --- [measure] ---
  k.push_back(K("measure.warmup_steps", T::integer, "First steps of the run, never in a figure.")
                  .def(5).at_least(0).at_most(1e9));
  k.push_back(K("measure.measure_steps", T::integer, "Steps after warmup that count; 0 = all the rest.")
                  .def(0).at_least(0).at_most(1e9));
  k.push_back(K("measure.target_accuracy", T::number, "Test accuracy (a fraction) whose first reaching is stored: wall time, steps, epochs, images; 0 = none.")
                  .def(0.0).at_least(0).at_most(1));
  // --- [profile] ---
  k.push_back(K("profile.nvtx", T::boolean, "NVTX ranges (run, epoch, step, phases).").def(true));
  k.push_back(K("profile.cupti", T::choice, "CUPTI activity: none, per-kernel summary, or raw trace.")
                  .one_of({"off", "summary", "trace"}).def("off"));
  k.push_back(K("profile.layers", T::boolean, "Time every layer in both passes (stored as kernel rows): host time on the CPU, its kernels' time from CUPTI on a GPU (needs profile.cupti); an NVTX range per layer.").def(false));
  k.push_back(K("profile.trace_steps", T::integer, "cupti = \"trace\": steps whose raw records are kept.")
                  .def(5).at_least(1));
  // --- [distributed] ---
  k.push_back(K("distributed.backend", T::choice, "Collectives between ranks: gloo (CPU ranks), nccl (GPU ranks); auto picks by train.device.")
                  .one_of({"auto", "gloo", "nccl"}).def("auto"));
  k.push_back(K("distributed.bucket_mb", T::number, "Gradients summed across ranks in buckets of this many MiB while the backward pass runs (PyTorch DDP's 25); 0 = all at once after it.")
                  .def(25.0).at_least(0).at_most(4096));
  k.push_back(K("distributed.timeout_s", T::integer, "Seconds a rank waits for the others (joining, each collective) before the run fails.")
                  .def(120).at_least(1).at_most(86400));
  // --- [sweep] ---
  k.push_back(K("sweep.mode", T::choice, "grid: every combination, first axis slowest; zip: element-wise.")
                  .one_of({"grid", "zip"}).def("grid").not_run());
  // --- [store] ---
  k.push_back(K("store.path", T::string, "SQLite result file, relative to the working directory.")
                  .def("xrun.db").fixed());
  k.push_back(K("store.label", T::string, "A name for this machine (\"4090D-box\"); \"\" = the host name.")
                  .def("").fixed().max_len(128));
  return k;
}

// Optimal string alignment distance (Levenshtein with transpositions).
// Names far apart in length are never close: answered without the table, so a
// hostile 10 MB key costs nothing.
int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  if (n > m + 16 || m > n + 16) return static_cast<int>(std::max(n, m));
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = int(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = int(j);
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string last_segment(const std::string& dotted) {
  auto p = dotted.rfind('.');
  return p == std::string::npos ? dotted : dotted.substr(p + 1);
}
std::string parent_of(const std::string& dotted) {
  auto p = dotted.rfind('.');
  return p == std::string::npos ? "" : dotted.substr(0, p);
}

std::string quoted(const std::string& s) { return json(s).dump(); }

std::string range_text(const Range& r, bool integer) {
  // Bounds print as integers when whole: "[0, 1)", "> 0", "[1, 1024]".
  auto num = [&](double v) {
    return integer || v == std::floor(v) ? std::to_string(int64_t(v)) : format_number(v);
  };
  bool lo = std::isfinite(r.min), hi = std::isfinite(r.max);
  if (lo && hi)
    return std::string(r.min_open ? "(" : "[") + num(r.min) + ", " + num(r.max) + (r.max_open ? ")" : "]");
  if (lo) return std::string(r.min_open ? "> " : ">= ") + num(r.min);
  if (hi) return std::string(r.max_open ? "< " : "<= ") + num(r.max);
  return "";
}

std::string choices_text(const std::vector<std::string>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + quoted(c[i]);
  return s;
}

// "an integer", "a number" with " >= 1" / " in (0, 1]" appended when bounded.
std::string bounded(const char* noun, const Range& r, bool integer) {
  std::string t = range_text(r, integer);
  if (t.empty()) return noun;
  return std::string(noun) + (t[0] == '[' || t[0] == '(' ? " in " : " ") + t;
}

[[noreturn]] void problem(const toml::node& at, std::string msg) { throw ValueProblem{&at, std::move(msg)}; }

// A number node as double (integers accepted), or nullopt.
bool as_number(const toml::node& n, double* out) {
  if (auto* f = n.as_floating_point()) { *out = f->get(); return true; }
  if (auto* i = n.as_integer()) { *out = double(i->get()); return true; }
  return false;
}

json check_integer(const KeySpec& s, const toml::node& n, const std::string& expected) {
  auto* i = n.as_integer();
  if (!i) problem(n, "expected " + expected + ", found " + describe_node(n, true));
  int64_t v = i->get();
  if (!s.range.contains(double(v)))
    problem(n, "expected " + bounded("an integer", s.range, true) + ", found " + std::to_string(v));
  return json(v);
}

json check_number(const KeySpec& s, const Range& r, const toml::node& n, const std::string& expected) {
  double v;
  if (!as_number(n, &v)) problem(n, "expected " + expected + ", found " + describe_node(n, true));
  if (!std::isfinite(v)) problem(n, "expected a finite number, found " + describe_node(n, false));
  if (!r.contains(v)) problem(n, "expected " + bounded("a number", r, false) + ", found " + describe_node(n, false));
  return json(v);
}

}  // namespace

bool Range::bounded() const { return std::isfinite(min) || std::isfinite(max); }

bool Range::contains(double v) const {
  if (min_open ? !(v > min) : !(v >= min)) return false;
  if (max_open ? !(v < max) : !(v <= max)) return false;
  return true;
}

const std::vector<KeySpec>& keys() {
  static const std::vector<KeySpec> table = build_keys();
  return table;
}

const KeySpec* find(const std::string& dotted) {
  for (auto& k : keys())
    if (k.key == dotted) return &k;
  return nullptr;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> list = [] {
    std::vector<std::string> s;
    for (auto& k : keys()) {
      std::string p = parent_of(k.key);
      if (std::find(s.begin(), s.end(), p) == s.end()) s.push_back(p);
    }
    return s;
  }();
  return list;
}

bool is_section(const std::string& dotted) {
  if (dotted.empty()) return false;
  for (auto& k : keys())
    if (k.key.size() > dotted.size() && k.key.compare(0, dotted.size(), dotted) == 0 &&
        k.key[dotted.size()] == '.')
      return true;
  return false;
}

std::string suggest(const std::string& unknown, bool tables, bool sweep_axes) {
  std::vector<std::string> names;
  if (tables) {
    for (auto& s : sections())
      if (!s.empty()) names.push_back(s);
  } else {
    for (auto& k : keys())
      if (!sweep_axes || (k.run_setting && k.sweepable)) names.push_back(k.key);
  }
  const std::string last = last_segment(unknown), parent = parent_of(unknown);
  const int limit = std::max(2, int(last.size()) / 3);
  std::string best;
  int best_score = limit + 1;
  for (auto& name : names) {
    int full = edit_distance(unknown, name);
    // Same last segment in another table ("train.lr" -> "train.optimizer.lr")
    // costs one more than in the same table.
    int seg = edit_distance(last, last_segment(name)) + (parent_of(name) == parent ? 0 : 1);
    int score = std::min(full, seg);
    if (score < best_score) best_score = score, best = name;
  }
  return best;
}

std::string closest_name(const std::string& unknown, const std::vector<std::string>& names) {
  const int limit = std::max(2, static_cast<int>(unknown.size()) / 3);
  std::string best;
  int best_score = limit + 1;
  for (const std::string& name : names) {
    const int score = edit_distance(unknown, name);
    if (score < best_score) best_score = score, best = name;
  }
  return best;
}

std::string format_number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, int64_t(v));
    return std::string(buf, r.ptr) + ".0";
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

double float_to_double(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

std::string render(const json& v) {
  if (v.is_string()) return v.dump();
  if (v.is_number_float()) return format_number(v.get<double>());
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + render(v[i]);
    return s + "]";
  }
  return v.dump();
}

std::string describe_node(const toml::node& n, bool with_type) {
  auto with = [&](const char* type, const std::string& text) {
    return with_type ? std::string(type) + " " + text : text;
  };
  if (auto* s = n.as_string()) return with("a string", quoted(s->get()));
  if (auto* i = n.as_integer()) return with("an integer", std::to_string(i->get()));
  if (auto* f = n.as_floating_point()) {
    double v = f->get();
    std::string t = std::isnan(v) ? "nan" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : format_number(v);
    return with("a float", t);
  }
  if (auto* b = n.as_boolean()) return with("a boolean", b->get() ? "true" : "false");
  if (n.is_array()) return "a list";
  if (n.is_table()) return "a table";
  return "a date/time";
}

std::string expected_text(const KeySpec& s) {
  switch (s.type) {
    case KeyType::boolean: return "true or false";
    case KeyType::integer: return bounded("an integer", s.range, true);
    case KeyType::number: return bounded("a number", s.range, false);
    case KeyType::string: return s.extra_check ? "a string: " + s.pattern_doc : "a string";
    case KeyType::choice: return "one of " + choices_text(s.choices);
    case KeyType::number_list: {
      std::string count = s.length ? std::to_string(s.length) + " numbers" : "numbers";
      std::string r = range_text(s.range, false);
      if (!r.empty()) r = (r[0] == '[' || r[0] == '(' ? " in " : " ") + r;
      return "a list of " + count + r;
    }
    case KeyType::choice_list: return "a list of strings from " + choices_text(s.choices);
    case KeyType::integer_or_auto: return bounded("an integer", s.range, true) + " or \"auto\"";
    case KeyType::boolean_or_cached: return "true, false or \"cached\"";
  }
  return "";
}

json check_value(const KeySpec& s, const toml::node& n) {
  const std::string expected = expected_text(s);
  auto wrong_type = [&]() { return ValueProblem{&n, "expected " + expected + ", found " + describe_node(n, true)}; };
  switch (s.type) {
    case KeyType::boolean:
      if (auto* b = n.as_boolean()) return json(b->get());
      throw wrong_type();
    case KeyType::integer:
      return check_integer(s, n, expected);
    case KeyType::number:
      return check_number(s, s.range, n, expected);
    case KeyType::string: {
      auto* v = n.as_string();
      if (!v) throw wrong_type();
      const std::string& text = v->get();
      if (text.size() > static_cast<size_t>(s.max_bytes))
        problem(n, "expected at most " + std::to_string(s.max_bytes) + " bytes, found a string of " +
                       std::to_string(text.size()));
      for (unsigned char c : text)
        if ((c < 0x20 || c == 0x7f) && !(s.multiline && (c == '\n' || c == '\t'))) {
          char code[8];
          std::snprintf(code, sizeof code, "\\u%04X", c);
          problem(n, std::string("expected printable text, found a control character (") + code +
                         ")" + (s.multiline ? "" : "; values are one line"));
        }
      if (s.extra_check) {
        std::string want = s.extra_check(v->get());
        if (!want.empty()) problem(n, "expected " + want + ", found " + quoted(v->get()));
      }
      return json(v->get());
    }
    case KeyType::choice: {
      auto* v = n.as_string();
      if (!v) throw wrong_type();
      if (std::find(s.choices.begin(), s.choices.end(), v->get()) == s.choices.end())
        problem(n, "expected one of " + choices_text(s.choices) + ", found " + quoted(v->get()));
      return json(v->get());
    }
    case KeyType::number_list: {
      auto* a = n.as_array();
      if (!a) throw wrong_type();
      json out = json::array();
      for (auto& e : *a) out.push_back(check_number(s, s.range, e, bounded("a number", s.range, false)));
      if (s.length && int(a->size()) != s.length)
        problem(n, "expected " + expected + ", found " + std::to_string(a->size()) +
                       (a->size() == 1 ? " value" : " values"));
      return out;
    }
    case KeyType::choice_list: {
      auto* a = n.as_array();
      if (!a) throw wrong_type();
      json out = json::array();
      for (auto& e : *a) {
        auto* v = e.as_string();
        if (!v) problem(e, "expected one of " + choices_text(s.choices) + ", found " + describe_node(e, true));
        if (std::find(s.choices.begin(), s.choices.end(), v->get()) == s.choices.end())
          problem(e, "expected one of " + choices_text(s.choices) + ", found " + quoted(v->get()));
        for (auto& seen : out)
          if (seen == v->get()) problem(e, "expected each entry once, found " + quoted(v->get()) + " twice");
        out.push_back(v->get());
      }
      return out;
    }
    case KeyType::integer_or_auto:
      if (auto* v = n.as_string()) {
        if (v->get() == "auto") return json("auto");
        problem(n, "expected " + expected + ", found " + describe_node(n, true));
      }
      return check_integer(s, n, expected);
    case KeyType::boolean_or_cached:
      if (auto* b = n.as_boolean()) return json(b->get());
      if (auto* v = n.as_string(); v && v->get() == "cached") return json("cached");
      throw wrong_type();
  }
  throw wrong_type();
}

// --- Markdown key reference ---------------------------------------------------

namespace {

std::string md_escape(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string type_name(const KeySpec& s) {
  switch (s.type) {
    case KeyType::boolean: return "boolean";
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::string: return "string";
    case KeyType::choice: return "string";
    case KeyType::number_list: return "list of numbers";
    case KeyType::choice_list: return "list of strings";
    case KeyType::integer_or_auto: return "integer or `\"auto\"`";
    case KeyType::boolean_or_cached: return "boolean or `\"cached\"`";
  }
  return "";
}

std::string allowed_doc(const KeySpec& s) {
  auto code = [](const std::string& t) { return "`" + t + "`"; };
  bool integer = s.type == KeyType::integer || s.type == KeyType::integer_or_auto;
  std::string r = range_text(s.range, integer);
  std::string out;
  switch (s.type) {
    case KeyType::choice:
    case KeyType::choice_list:
      for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? ", " : "") + code(quoted(s.choices[i]));
      if (s.type == KeyType::choice_list) out = "any of " + out;
      break;
    case KeyType::string:
      out = s.pattern_doc;
      out += (out.empty() ? "" : "; ") + std::string("at most ") + std::to_string(s.max_bytes) +
             " bytes" + (s.multiline ? "" : ", one line");
      break;
    case KeyType::boolean_or_cached: out = "`true`, `false`, `\"cached\"`"; break;
    case KeyType::number_list: {
      std::vector<std::string> parts;
      if (s.length) parts.push_back(std::to_string(s.length) + " values");
      if (s.key == "data.mean" || s.key == "data.std") parts.push_back("one per channel");
      if (!r.empty()) parts.push_back(std::string("each ") + (r[0] == '[' || r[0] == '(' ? "in " : "") + code(r));
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
      break;
    }
    case KeyType::integer_or_auto: out = code(r) + " or `\"auto\"`"; break;
    case KeyType::integer:
    case KeyType::number:
      if (!r.empty()) out = code(r);
      break;
    case KeyType::boolean: break;
  }
  return md_escape(out);
}

std::string default_doc(const KeySpec& s) {
  if (s.required) return "required";
  if (!s.depends.empty()) return md_escape(s.depends);
  std::string out = "`";
  out += md_escape(render(s.default_value));
  out += '`';
  return out;
}

}  // namespace

std::string markdown() {
  std::ostringstream o;
  for (auto& section : sections()) {
    o << "### " << (section.empty() ? "Top level" : "`[" + section + "]`") << "\n\n";
    if (section == "sweep")
      o << "Every other key under `[sweep]` is an axis: a run key (dotted, e.g. `train.batch_size`) "
           "with a list of values of that key's type (a list of lists for list keys). "
           "`name`, `description` and `store.*` cannot be swept.\n\n";
    o << "| Key | Type | Default | Allowed | Description |\n";
    o << "|---|---|---|---|---|\n";
    for (auto& k : keys()) {
      if (parent_of(k.key) != section) continue;
      o << "| `" << k.key << "` | " << type_name(k) << " | " << default_doc(k) << " | " << allowed_doc(k)
        << " | " << md_escape(k.doc) << " |\n";
    }
    o << "\n";
  }
  std::string s = o.str();
  s.pop_back();  // one trailing newline
  return s;
}

}  // namespace xrun::schema
