// tests/cuda/cuda_vs_cpu_test.cpp: the CUDA engine against the CPU engine
// (the oracle, itself checked against a plain-loop reference and PyTorch) on
// the same inputs and weights: every op family forward and backward, the
// optimizers, gradient accumulation over several steps, and the device's
// batch loading (normalisation, crop and flip, the overlapped copy), in
// fp32, tf32, fp16 and bf16. Whole training steps of resnet18 and resnet50
// are in cuda_parity_test.cpp.
//
// test_cuda's main (cuda_main.cpp) runs none of this where no GPU can run
// this build's kernels: CTest then reports every case as skipped (CI has no
// GPU). tests/gpu/check.sh runs them where one is lent.
//
// Errors are judged per tensor by the normalised mean squared error
//   NMSE = sum (gpu - cpu)^2 / sum cpu^2
// (as ggml's test-backend-ops does), so one threshold fits tensors of any
// scale: per op fp32 1e-9 (cuDNN and oneDNN sum in different orders; ~3e-5
// relative RMS), tf32 1e-5 (10-bit mantissas in the products), fp16 1e-5,
// bf16 1e-4 (8-bit mantissas); 10x that for a chain of a few ops.
// XRUN_TEST_ERRORS=1 prints every NMSE as it is measured, to calibrate on a
// new card; the table after the session lists them all.
#include "catch2_compat.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "cuda_test_util.h"
#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/loader.h"

using namespace xrun;
using namespace xrun::cudatest;

namespace {

// An activation [n, c, h, w] to feed the op under test, which the test
// writes itself. The CUDA backend's input() takes at most 16 channels (its
// normalisation table), so a wider one is the output of a 1x1 convolution
// from an 8-channel input that never runs; narrower ones are the input
// itself (3 channels: padded to 8 in fp16/bf16, as conv1 sees it).
struct Activation {
  Tensor* x = nullptr;
  std::unique_ptr<ConvOp> widen;  // declares x when c > 16
};

Activation activation(Backend& be, int64_t n, int64_t c, int64_t h, int64_t w) {
  Activation a;
  if (c <= 16) {
    a.x = be.input(n, c, h, w);
    return a;
  }
  Tensor* in = be.input(n, 8, h, w);
  a.widen = be.conv("widen", {n, 8, h, w, c, 1, 1, 1, 0}, in, nullptr);
  a.x = a.widen->y;
  return a;
}

// `n` values in planes of `plane` (<= 256) elements, each plane a seeded
// shuffle of k/128 for k = -128..127: exactly representable in fp16 and bf16
// (at most 8 significant bits) and all distinct within a plane.
std::vector<float> distinct_in_every_plane(int64_t n, int64_t plane, uint32_t seed) {
  if (plane > 256 || n % plane != 0) throw std::logic_error("distinct_in_every_plane: bad plane");
  std::vector<float> grid(256);
  for (int k = 0; k < 256; ++k) grid[k] = static_cast<float>(k - 128) / 128.0f;
  std::mt19937 g(seed);
  std::vector<float> v;
  v.reserve(static_cast<size_t>(n));
  for (int64_t p = 0; p < n / plane; ++p) {
    std::shuffle(grid.begin(), grid.end(), g);
    v.insert(v.end(), grid.begin(), grid.begin() + plane);
  }
  return v;
}

}  // namespace

TEST_CASE("cuda conv: forward, backward-data, backward-filter match the CPU", "[cuda]") {
  struct Shape {
    ConvShape s;
    const char* what;
  };
  std::vector<Shape> shapes = {
      {{4, 3, 32, 32, 64, 7, 7, 2, 3}, "stem 7x7/2, 3 channels"},
      {{4, 64, 16, 16, 64, 1, 1, 1, 0}, "1x1"},
      {{4, 64, 16, 16, 64, 3, 3, 1, 1}, "3x3"},
      {{4, 128, 16, 16, 128, 3, 3, 2, 1}, "3x3/2"},
      {{4, 256, 8, 8, 512, 1, 1, 2, 0}, "1x1/2 downsample"},
  };
  for (const std::string& p : precisions())
    for (const Shape& sh : shapes) {
      compare_backends("conv", p, op_threshold(p), sh.what, [&](Backend& be) {
        const ConvShape& s = sh.s;
        const Activation in = activation(be, s.n, s.c, s.h, s.w);
        Tensor* x = in.x;
        // The first conv has no input gradient; the others do.
        Tensor* dx = s.c == 3 ? nullptr : be.tensor_like(x, "dx", TensorRole::activation_grad);
        auto op = be.conv("conv", s, x, dx);
        be.allocate();
        be.write(x, random_floats(x->numel(), 1));
        be.write(op->weight, random_floats(op->weight->numel(), 2, -0.1f, 0.1f));
        be.write(op->dy, random_floats(op->dy->numel(), 3));
        op->forward();
        op->backward_data();
        op->backward_weights();
        Outputs out = {{"y", read(be, op->y)}, {"dw", read(be, op->weight_grad)}};
        if (dx) out["dx"] = read(be, dx);
        return out;
      });
    }
}

TEST_CASE("cuda batch norm: plain, +ReLU, +residual+ReLU, running stats, inference", "[cuda]") {
  for (const std::string& p : precisions())
    for (BnActivation act : {BnActivation::none, BnActivation::relu, BnActivation::add_relu}) {
      const std::string what =
          act == BnActivation::none ? "plain" : act == BnActivation::relu ? "relu" : "add_relu";
      compare_backends("bn", p, op_threshold(p) * 10, what, [&](Backend& be) {
        const Activation in = activation(be, 4, 32, 8, 8);
        Tensor* x = in.x;
        Tensor* dx = be.tensor_like(x, "dx", TensorRole::activation_grad);
        Tensor* r = be.tensor_like(x, "residual", TensorRole::activation);
        Tensor* dr = be.tensor_like(x, "d_residual", TensorRole::activation_grad);
        const bool add = act == BnActivation::add_relu;
        auto bn = be.batch_norm("bn", x, dx, act, add ? r : nullptr, add ? dr : nullptr);
        be.allocate();
        // Inputs the GPU stores exactly (representable): the add+ReLU's
        // mask then differs only where the op's own output rounding moves
        // a value across zero.
        be.write(x, representable(random_floats(x->numel(), 4, -2, 3), p));
        be.write(r, representable(random_floats(r->numel(), 5), p));
        be.write(bn->gamma, random_floats(32, 6, 0.5f, 1.5f));
        be.write(bn->beta, random_floats(32, 7, -0.5f, 0.5f));
        be.write(bn->running_mean, std::vector<float>(32, 0.0f));
        be.write(bn->running_var, std::vector<float>(32, 1.0f));
        be.write(bn->dy, representable(random_floats(x->numel(), 8), p));
        bn->forward_train();
        bn->forward_train();  // running statistics move twice
        bn->backward();
        Outputs out = {{"y", read(be, bn->y)},
                       {"dx", read(be, dx)},
                       {"dgamma", read(be, bn->gamma_grad)},
                       {"dbeta", read(be, bn->beta_grad)},
                       {"running_mean", read(be, bn->running_mean)},
                       {"running_var", read(be, bn->running_var)}};
        if (add) out["d_residual"] = read(be, dr);
        bn->forward_infer();
        out["y_infer"] = read(be, bn->y);
        return out;
      });
    }
}

TEST_CASE("cuda pooling, fc and loss match the CPU", "[cuda]") {
  for (const std::string& p : precisions())
    compare_backends("head", p, op_threshold(p) * 10, "maxpool, avgpool, fc, loss", [&](Backend& be) {
      // maxpool -> global avg pool -> fc -> softmax cross-entropy: the stem's
      // pool and the model's head, backward included.
      const Activation in = activation(be, 6, 64, 16, 16);
      Tensor* x = in.x;
      Tensor* dx = be.tensor_like(x, "dx", TensorRole::activation_grad);
      auto pool = be.max_pool("maxpool", x, dx, 3, 2, 1);
      auto avg = be.global_avg_pool("avgpool", pool->y, pool->dy);
      auto fc = be.linear("fc", avg->y, avg->dy, 10);
      auto loss = be.softmax_cross_entropy(fc->y, fc->dy);
      be.allocate();
      // Max pooling routes each window's gradient to its largest element:
      // values that tie once rounded to fp16/bf16 would let cuDNN pick
      // another element than the CPU's fp32 argmax (whole dy terms moved,
      // about 19 of 24,576 windows in fp16 and 189 in bf16 with uniform
      // draws). Every 16x16 plane is a shuffle of k/128, k = -128..127:
      // exact in all four precisions and distinct within any window.
      be.write(x, distinct_in_every_plane(x->numel(), 16 * 16, 9));
      be.write(fc->weight, random_floats(640, 10, -0.3f, 0.3f));
      be.write(fc->bias, random_floats(10, 11, -0.1f, 0.1f));
      be.write_labels(std::vector<int32_t>{0, 3, 9, 1, 4, 7});
      pool->forward_train();
      avg->forward_train();
      fc->forward();
      loss->forward_backward(5, 8.0f);  // the last row is padding
      fc->backward();
      avg->backward();
      pool->backward();
      const auto r = loss->read_results();
      return Outputs{{"pool", read(be, pool->y)},    {"avg", read(be, avg->y)},
                     {"logits", read(be, fc->y)},    {"dlogits", read(be, fc->dy)},
                     {"dW", read(be, fc->weight_grad)}, {"db", read(be, fc->bias_grad)},
                     {"dx", read(be, dx)},
                     {"loss", {static_cast<float>(r.loss_sum / r.rows), float(r.correct), float(r.rows)}}};
    });
}

TEST_CASE("cuda optimizer: AdamW and SGD steps, accumulation and the inf check", "[cuda]") {
  for (const std::string& p : precisions())
    for (const char* name : {"adamw", "sgd"})
      compare_backends(std::string("opt ") + name, p, op_threshold(p) * 10, "conv, bn", [&](Backend& be) {
        Tensor* x = be.input(2, 16, 8, 8);
        Tensor* dx = be.tensor_like(x, "dx", TensorRole::activation_grad);
        auto conv = be.conv("conv", {2, 16, 8, 8, 16, 3, 3, 1, 1}, x, dx);
        auto bn = be.batch_norm("bn", conv->y, conv->dy, BnActivation::relu, nullptr, nullptr);
        OptimizerSettings s;
        s.name = name;
        s.momentum = 0.9;
        s.weight_decay = 0.01;
        auto opt = be.optimizer(s, true);
        be.allocate();
        be.write(x, random_floats(x->numel(), 12));
        be.write(conv->weight, random_floats(conv->weight->numel(), 13, -0.2f, 0.2f));
        be.write(bn->gamma, std::vector<float>(16, 1.0f));
        be.write(bn->beta, std::vector<float>(16, 0.0f));
        const std::vector<float> dy = random_floats(bn->dy->numel(), 14);
        // Two micro-batches accumulated, then three steps. backward()
        // consumes dy (BatchNormOp's contract: the CUDA engine's unfused
        // BN+ReLU masks it in place), so it is written before every one.
        for (int step = 1; step <= 3; ++step) {
          for (int micro = 0; micro < 2; ++micro) {
            conv->forward();
            bn->forward_train();
            be.write(bn->dy, dy);
            bn->backward();
            conv->backward_weights();
            micro == 0 ? opt->accumulate_begin() : opt->accumulate_add();
          }
          opt->accumulate_end();
          opt->step({1e-2, step, 4.0f, true});
          CHECK_FALSE(opt->found_inf());
        }
        std::vector<float> m(conv->weight->numel());
        opt->read_state(0, conv->weight, m);
        be.synchronize();
        return Outputs{{"weight", read(be, conv->weight)}, {"gamma", read(be, bn->gamma)},
                       {"state0", m}};
      });
}

TEST_CASE("cuda gradient accumulation: three steps of two micro-batches update conv and fc "
          "weights as the CPU does",
          "[cuda]") {
  // What it guards: conv and fc gradients of fp16/bf16 runs are written only
  // to the half-precision gradient mirror; the fp32 gradient slots of those
  // weights stay zero, and the optimizer reads fp32 + half. An
  // accumulate_end() that copied the sum back into the fp32 slots (as the
  // CPU does, where it is harmless because every backward overwrites them)
  // left it there: the next step's accumulate_begin/add then read
  // "fp32 (last step's sum) + half (this micro-batch)" twice, so the steps
  // applied T1 = S1, T2 = 2 T1 + S2, T3 = 2 T2 + S3 instead of S1, S2, S3
  // (S = the step's true sum): after three steps the conv and fc weights have
  // moved by about 11 S instead of 3 S. Comparing the weights' *updates*
  // (final - initial; the weights themselves are dominated by their initial
  // values) with plain SGD (lr 0.1, no momentum, no weight decay: the update
  // is exactly -lr times the sum of the applied gradients) turns that into an
  // NMSE of order 1 to 10, against thresholds of 1e-8 to 1e-3. fp32 and tf32
  // runs have no half mirror and take the same path as the CPU; they run to
  // show the case itself agrees. The model is conv -> global average pool ->
  // fc -> loss, without batch norm and ReLU: a ReLU input within rounding of
  // zero falls on either side in half precision and moves a whole gradient
  // term (a kink), which would make a tight threshold flaky. The loss scale
  // is split over the micro-batches and divided out by the step, as the
  // trainer does, with the inf check on.
  constexpr int n = 4, c = 16, hw = 8, classes = 10, steps = 3, micros = 2;
  constexpr float kScale = 8.0f;
  for (const std::string& p : precisions())
    compare_backends(
        "accumulate", p, op_threshold(p) * 10, "sgd lr 0.1, 3 steps x 2 micro-batches",
        [&](Backend& be) {
          Tensor* x = be.input(n, c, hw, hw);
          auto conv = be.conv("conv", {n, c, hw, hw, 16, 3, 3, 1, 1}, x, nullptr);
          auto pool = be.global_avg_pool("avgpool", conv->y, conv->dy);
          auto fc = be.linear("fc", pool->y, pool->dy, classes);
          auto loss = be.softmax_cross_entropy(fc->y, fc->dy);
          OptimizerSettings s;
          s.name = "sgd";
          s.momentum = 0;
          s.weight_decay = 0;
          auto opt = be.optimizer(s, true);
          be.allocate();
          const std::vector<float> conv0 = random_floats(conv->weight->numel(), 31, -0.2f, 0.2f);
          const std::vector<float> fc0 = random_floats(fc->weight->numel(), 32, -0.3f, 0.3f);
          be.write(conv->weight, conv0);
          be.write(fc->weight, fc0);
          be.write(fc->bias, std::vector<float>(classes, 0.0f));
          std::vector<float> losses;
          for (int step = 1; step <= steps; ++step) {
            for (int micro = 0; micro < micros; ++micro) {
              const uint32_t seed = static_cast<uint32_t>(100 + 10 * step + micro);
              be.write(x, random_floats(x->numel(), seed));
              std::vector<int32_t> labels(n);
              for (int i = 0; i < n; ++i)
                labels[i] = static_cast<int32_t>((seed + 3 * i) % classes);
              be.write_labels(labels);
              conv->forward();
              pool->forward_train();
              fc->forward();
              loss->forward_backward(n, kScale / micros);
              fc->backward();
              pool->backward();
              conv->backward_weights();
              micro == 0 ? opt->accumulate_begin() : opt->accumulate_add();
            }
            opt->accumulate_end();
            opt->step({0.1, step, kScale, true});
            CHECK_FALSE(opt->found_inf());
            const auto r = loss->read_results();
            REQUIRE(r.rows == n * micros);
            losses.push_back(static_cast<float>(r.loss_sum / r.rows));
          }
          auto update = [&](const Tensor* w, const std::vector<float>& initial) {
            std::vector<float> d = read(be, w);
            for (size_t i = 0; i < d.size(); ++i) d[i] -= initial[i];
            return d;
          };
          return Outputs{{"conv.weight update", update(conv->weight, conv0)},
                         {"fc.weight update", update(fc->weight, fc0)},
                         {"fc.bias", read(be, fc->bias)},
                         {"loss per step", losses}};
        });
}

TEST_CASE("cuda: a precision the card cannot train in is a clear error", "[cuda]") {
  // On sm_80+ every precision works; below it bf16 and tf32 are refused with
  // the compute capability in the message.
  for (const char* p : {"bf16", "tf32"}) {
    try {
      auto be = gpu(p);
      SUCCEED(std::string(p) + " accepted: this card is sm_80 or newer");
    } catch (const std::exception& e) {
      CHECK_THAT(e.what(), Catch::Contains("compute capability 8.0"));
    }
  }
}

namespace {

// What load_batch needs to run: an input and a loss (whose labels it
// writes). In fp16/bf16 the CUDA backend stores the 3-channel input padded
// to 8 channels, which global average pooling refuses; a convolution reads
// padded channels (its weights are padded likewise), so the smallest model
// with a loss is input -> 3x3 conv to 8 channels -> global average pool ->
// fc -> loss. The weights stay as allocated (zero): only the input is
// compared.
struct InputModel {
  Tensor* x = nullptr;
  std::unique_ptr<ConvOp> conv;
  std::unique_ptr<PoolOp> pool;
  std::unique_ptr<LinearOp> fc;
  std::unique_ptr<LossOp> loss;
};

InputModel input_model(Backend& be, int64_t n, int64_t c, int64_t h, int64_t w) {
  InputModel m;
  m.x = be.input(n, c, h, w);
  m.conv = be.conv("conv", {n, c, h, w, 8, 3, 3, 1, 1}, m.x, nullptr);
  m.pool = be.global_avg_pool("avgpool", m.conv->y, m.conv->dy);
  m.fc = be.linear("fc", m.pool->y, m.pool->dy, 2);
  m.loss = be.softmax_cross_entropy(m.fc->y, m.fc->dy);
  be.allocate();
  return m;
}

}  // namespace

TEST_CASE("cuda load_batch: crop and flip on the device equal the loader's on the host",
          "[cuda]") {
  // 8 images of 3x12x12; the draws cover every crop offset at the edges and
  // both flips. The CPU gets the images augmented by data::augment_sample
  // (what the loader does on the host); the GPU gets them raw with the draws.
  const int n = 8, c = 3, h = 12, w = 12;
  std::mt19937 g(9);
  std::vector<uint8_t> raw(static_cast<size_t>(n * c * h * w));
  for (auto& v : raw) v = static_cast<uint8_t>(1 + g() % 255);
  std::vector<int32_t> draws;
  for (int i = 0; i < n; ++i) {
    const int32_t crop_y = i % 2 ? 0 : 2 * data::kCropPad, crop_x = (i * 3) % (2 * data::kCropPad + 1);
    draws.insert(draws.end(), {crop_y, crop_x, i % 3 == 0 ? 1 : 0});
  }
  const std::vector<int32_t> labels = {0, 1, 0, 1, 1, 0, 1, 0};
  const std::vector<float> mean = {0.5f, 0.4f, 0.3f}, sd = {0.2f, 0.25f, 0.3f};
  for (const auto& augment_case : {std::pair{true, true}, {true, false}, {false, true}}) {
    const bool crop = augment_case.first, flip = augment_case.second;  // clang 14: no lambda capture of structured bindings
    const size_t sample = static_cast<size_t>(c * h * w);
    std::vector<uint8_t> augmented(raw.size());
    for (int i = 0; i < n; ++i) {
      const data::AugmentDraw d{draws[3 * i], draws[3 * i + 1], draws[3 * i + 2] != 0};
      data::augment_sample(raw.data() + sample * i, augmented.data() + sample * i, c, h, w, crop,
                           flip, d);
    }
    auto input_of = [&](Backend& be, bool on_device) {
      InputModel m = input_model(be, n, c, h, w);
      const BatchAugment augment{crop, flip, draws.data()};
      if (on_device)
        be.load_batch(raw.data(), labels.data(), n, mean, sd, &augment);
      else
        be.load_batch(augmented.data(), labels.data(), n, mean, sd);
      return read(be, m.x);
    };
    cpu::CpuBackend cpu(0);
    const std::vector<float> want = input_of(cpu, false);
    for (const std::string& p : precisions()) {
      auto be = gpu(p);
      REQUIRE(be->augments_batches());
      check_nmse(input_of(*be, true), want, op_threshold(p), "load_batch", p,
                 std::string("3x12x12 input") + (crop ? ", crop" : "") + (flip ? ", flip" : ""));
    }
  }
}

TEST_CASE("cuda stage_batch: a batch copied while the previous one computes equals load_batch",
          "[cuda]") {
  // The trainer's overlapped input: batch A is staged and consumed, the
  // forward pass is launched, batch B is staged before anything waits, then
  // consumed. The input must be B exactly as the CPU's load_batch gives it.
  const int n = 4, c = 3, h = 16, w = 16;
  std::mt19937 g(21);
  std::vector<uint8_t> a(static_cast<size_t>(n * c * h * w)), b(a.size());
  for (auto& v : a) v = static_cast<uint8_t>(g() & 255);
  for (auto& v : b) v = static_cast<uint8_t>(g() & 255);
  const std::vector<int32_t> labels_a = {0, 1, 0, 1}, labels_b = {1, 1, 0, 0};
  const std::vector<float> mean = {0.5f, 0.5f, 0.5f}, sd = {0.25f, 0.25f, 0.25f};
  cpu::CpuBackend cpu(0);
  InputModel cm = input_model(cpu, n, c, h, w);
  cpu.load_batch(b.data(), labels_b.data(), 3, mean, sd, nullptr);
  const std::vector<float> want = read(cpu, cm.x);
  for (const std::string& p : precisions()) {
    auto be = gpu(p);
    DeviceHooks* device = be->device();
    REQUIRE(device != nullptr);
    InputModel m = input_model(*be, n, c, h, w);
    device->stage_batch(a.data(), labels_a.data(), n, nullptr);
    device->consume_staged_batch(mean, sd);
    m.conv->forward();
    m.pool->forward_train();
    m.fc->forward();
    device->stage_batch(b.data(), labels_b.data(), 3, nullptr);  // before any wait
    CHECK_THROWS_AS(device->stage_batch(b.data(), labels_b.data(), 3, nullptr), std::logic_error);
    device->consume_staged_batch(mean, sd);
    be->synchronize();
    check_nmse(read(*be, m.x), want, op_threshold(p), "stage_batch", p,
               "3x16x16 input, 3 of 4 rows");
  }
}
