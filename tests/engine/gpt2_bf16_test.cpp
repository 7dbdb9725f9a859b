// tests/engine/gpt2_bf16_test.cpp: GPT-2 in bf16 on the CPU engine (AMX or
// AVX512_BF16; skipped, saying why, elsewhere): the Conv1D and tied layers'
// GEMMs read bf16 operands and accumulate in fp32, so each product equals
// the float64 product of the bf16-rounded operands to fp32 accumulation's
// error (checked per element against that reference, for y, dx and dW of
// both layers), and differs from the fp32 engine's by bf16's rounding; the
// bf16 weight copy follows every write of the weight, and AdamW writes it
// as it updates the parameters; and a small GPT-2
// learns a text in bf16 as it does in fp32.
#include "catch2_compat.h"

#include <cmath>
#include <random>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/trainer.h"
#include "op_test_util.h"
#include "skip.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;

namespace {

using optest::nmse;
using optest::no_cpu_bf16_kernels;

std::vector<float> uniform(int64_t n, uint32_t seed, float scale = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(g);
  return v;
}

std::vector<double> rounded(const std::vector<float>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::bf16_to_float(cpu::float_to_bf16(v[i]));
  return out;
}

// c[m, n] = sum_k a(i, k) b(k, j), the operands read through accessors.
template <class A, class B>
std::vector<double> product(int64_t m, int64_t k, int64_t n, A a, B b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      c[i * n + j] = s;
    }
  return c;
}

// Every element of `got` within fp32 accumulation's error of `want`: k
// terms of magnitude up to `term` each add at most k 2^-24 term (a loose
// bound for any summation order).
void check_accumulated(const std::vector<float>& got, const std::vector<double>& want, int64_t k,
                       double term, const std::string& what) {
  REQUIRE(got.size() == want.size());
  const double bound = static_cast<double>(k) * std::ldexp(term, -24) * 4;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  INFO(what << ": worst " << worst << ", bound " << bound);
  CHECK(worst <= bound);
}

struct LayerRun {
  std::vector<float> y, dx, dw;
};

// One Conv1D (tied = false: y = x W + b, W [in, out]) or tied layer (y = x
// W^T, W [out, in]) forward and backward on a backend of `precision`.
LayerRun run_layer(Precision precision, bool tied, int64_t rows, int64_t in, int64_t out,
                   const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& dy) {
  cpu::CpuBackend be(0, precision);
  Tensor* tokens = be.token_input(1, rows);
  auto emb = be.embedding("transformer.wte", "transformer.wpe", tokens, tied ? out : 4, rows, in);
  std::unique_ptr<LinearOp> op =
      tied ? be.linear_tied("lm_head", emb->y, emb->dy, emb->wte, emb->wte_grad)
           : be.linear_in_out("fc", emb->y, emb->dy, out);
  be.allocate();
  be.write(emb->y, x);
  be.write(op->weight, w);
  if (op->bias) be.write(op->bias, std::vector<float>(static_cast<size_t>(out), 0.0f));
  be.write(op->dy, dy);
  op->forward();
  op->backward();
  LayerRun r;
  r.y.resize(static_cast<size_t>(rows * out));
  r.dx.resize(static_cast<size_t>(rows * in));
  r.dw.resize(w.size());
  be.read(op->y, r.y);
  be.read(emb->dy, r.dx);
  be.read(op->weight_grad, r.dw);
  return r;
}

// A bf16 backend with one Conv1D layer over an embedding's output (which
// the cases write as the layer's input), and AdamW where asked; allocated.
struct Bf16Conv1D {
  cpu::CpuBackend be{0, Precision::bf16};
  std::unique_ptr<EmbeddingOp> emb;
  std::unique_ptr<LinearOp> op;
  std::unique_ptr<OptimizerOp> opt;
  Bf16Conv1D(int64_t rows, int64_t in, int64_t out, bool with_optimizer,
             const std::string& optimizer = "adamw") {
    Tensor* tokens = be.token_input(1, rows);
    emb = be.embedding("transformer.wte", "transformer.wpe", tokens, 4, rows, in);
    op = be.linear_in_out("fc", emb->y, emb->dy, out);
    OptimizerSettings settings;
    settings.name = optimizer;
    if (with_optimizer) opt = be.optimizer(settings, false);
    be.allocate();
  }
};

}  // namespace

TEST_CASE("gpt2 bf16: the GEMM layers multiply bf16-rounded operands with fp32 accumulation",
          "[gpt2][bf16]") {
  if (const std::string why = no_cpu_bf16_kernels(); !why.empty()) XRUN_SKIP(why);
  const int64_t rows = 48, in = 96, out = 80;
  for (const bool tied : {false, true}) {
    INFO((tied ? "tied layer" : "Conv1D"));
    const auto x = uniform(rows * in, 1), w = uniform(in * out, 2, 0.5f),
               dy = uniform(rows * out, 3);
    const LayerRun b = run_layer(Precision::bf16, tied, rows, in, out, x, w, dy);
    const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
    // W as [in, out] (Conv1D) or [out, in] (tied): the weight of input i, output o.
    const auto W = [&](int64_t i, int64_t o) { return tied ? wr[o * in + i] : wr[i * out + o]; };
    const auto y = product(rows, in, out, [&](int64_t r, int64_t i) { return xr[r * in + i]; }, W);
    const auto dx = product(rows, out, in, [&](int64_t r, int64_t o) { return dyr[r * out + o]; },
                            [&](int64_t o, int64_t i) { return W(i, o); });
    // dW in the weight's own layout: [in, out] = x^T dy, or [out, in] = dy^T x.
    const auto dw = tied ? product(out, rows, in, [&](int64_t o, int64_t r) { return dyr[r * out + o]; },
                                   [&](int64_t r, int64_t i) { return xr[r * in + i]; })
                         : product(in, rows, out, [&](int64_t i, int64_t r) { return xr[r * in + i]; },
                                   [&](int64_t r, int64_t o) { return dyr[r * out + o]; });
    check_accumulated(b.y, y, in, 0.5, "y");
    check_accumulated(b.dx, dx, out, 0.5, "dx");
    check_accumulated(b.dw, dw, rows, 1.0, "dW");
    // And not the fp32 engine's products: the operands were rounded (bf16's
    // half-ulp 2^-9 relative on each: NMSE ~1e-6).
    const LayerRun f = run_layer(Precision::fp32, tied, rows, in, out, x, w, dy);
    CHECK(nmse(b.y, f.y) > 1e-8);
    CHECK(nmse(b.y, f.y) < 1e-4);
    CHECK(nmse(b.dw, f.dw) > 1e-8);
  }
}

TEST_CASE("gpt2 bf16: the weight's bf16 copy follows every write of the weight", "[gpt2][bf16]") {
  if (const std::string why = no_cpu_bf16_kernels(); !why.empty()) XRUN_SKIP(why);
  const int64_t rows = 8, in = 32, out = 16;
  Bf16Conv1D layer(rows, in, out, false);
  auto& [be, emb, op, opt] = layer;
  be.write(emb->y, uniform(rows * in, 4));
  be.write(op->bias, std::vector<float>(out, 0.0f));
  std::vector<float> y(rows * out);
  for (const float value : {0.25f, -2.0f}) {  // exact in bf16: y = value * row sums of x
    INFO("weight " << value);
    be.write(op->weight, std::vector<float>(in * out, value));
    op->forward();
    be.read(op->y, y);
    std::vector<float> x(rows * in);
    be.read(emb->y, x);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += cpu::bf16_to_float(cpu::float_to_bf16(x[r * in + i]));
      CHECK(y[r * out] == Approx(value * sum).margin(1e-5));
    }
  }
}

TEST_CASE("gpt2 bf16: a small GPT-2 learns a text in bf16, its first steps on fp32's curve",
          "[gpt2][bf16][train]") {
  if (const std::string why = no_cpu_bf16_kernels(); !why.empty()) XRUN_SKIP(why);
  xrun_test::ScratchDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  xrun_test::write_bytes(dir.file("fox.txt"), text);
  std::vector<double> loss[2];
  std::string matmul_kernels[2];  // the runs' "matmul fwd" kernels, as oneDNN names them
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    RunConfig c = xrun_test::tiny_gpt2(dir.file("fox.txt"), 200);
    c.train.precision = p;
    xrun_test::RunWatch watch;
    const TrainResult r = train(c, watch);
    REQUIRE(watch.steps.size() == 200);
    for (const auto& s : watch.steps) loss[p == Precision::bf16].push_back(s.loss);
    const std::string kernels = r.environment.get("onednn_kernels");
    const size_t at = kernels.find("matmul fwd:");
    REQUIRE(at != std::string::npos);
    matmul_kernels[p == Precision::bf16] = kernels.substr(at, kernels.find(';', at) - at);
  }
  // The GEMMs ran other kernels than fp32's (oneDNN 2.6 names them
  // brg:avx512_core_amx_bf16 or brg:avx512_core_bf16, 3.x
  // brg_matmul:avx10_1_512_amx: the data type is not always in the name).
  INFO("fp32 " << matmul_kernels[0] << ", bf16 " << matmul_kernels[1]);
  CHECK(matmul_kernels[0] != matmul_kernels[1]);
  // The first 16 steps follow fp32's losses but for bf16's rounding (within
  // 0.1% here; at lr 1e-2 the runs then part as any two nearby
  // trajectories do: a loss spike at step 18 read 4.46 and 4.08, and by
  // step 100 they were 2.21 and 1.93); a weight copy left stale after an
  // update, or a gradient read from the wrong copy, parts them at once.
  for (size_t k = 0; k < 16; ++k) {
    INFO("step " << k << ": fp32 " << loss[0][k] << ", bf16 " << loss[1][k]);
    CHECK(loss[1][k] == Approx(loss[0][k]).epsilon(0.005));
  }
  // And it learns: the last 20 steps' mean from about ln 256 = 5.5.
  double last = 0;
  for (size_t k = 180; k < 200; ++k) last += loss[1][k] / 20;
  INFO("bf16's last 20 steps' mean loss " << last);
  CHECK(last < 2.0);
}

TEST_CASE("gpt2 bf16: AdamW writes the parameters' bf16 copy as it updates them, the layers read it",
          "[gpt2][bf16]") {
  if (const std::string why = no_cpu_bf16_kernels(); !why.empty()) XRUN_SKIP(why);
  const int64_t rows = 8, in = 32, out = 16;
  // SGD writes no copy: it must leave it stale, so the layers round the
  // updated weights themselves (a copy marked current after SGD would keep
  // the initial weights in every product for the whole run).
  for (const std::string optimizer : {"adamw", "sgd"}) {
    INFO(optimizer);
    const bool writes_copy = optimizer == "adamw";
    Bf16Conv1D layer(rows, in, out, true, optimizer);
    auto& [be, emb, op, opt] = layer;
    REQUIRE(be.bf16_weights() != nullptr);
    be.write(emb->y, uniform(rows * in, 5));
    be.write(op->weight, uniform(in * out, 6, 0.5f));
    be.write(op->bias, std::vector<float>(out, 0.0f));
    be.write(op->dy, uniform(rows * out, 7));
    op->forward();
    op->backward();
    OptimizerStep st;
    st.lr = 0.01;  // moves every weight by about lr: most bf16 roundings change
    opt->set_step(st);
    opt->apply();
    CHECK(be.bf16_weights_current() == writes_copy);
    // Every element of AdamW's copy is its parameter rounded to bf16.
    const float* p = be.region(TensorRole::parameter);
    const size_t n = be.region_bytes(TensorRole::parameter) / sizeof(float);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += be.bf16_weights()[i] != cpu::float_to_bf16(p[i]);
    if (writes_copy) CHECK(wrong == 0);
    // The next forward multiplies the updated weights' rounding (the copy the
    // optimizer wrote, not one made before the update).
    std::vector<float> x(rows * in), w(in * out), b(out), y(rows * out);
    be.read(emb->y, x);
    be.read(op->weight, w);
    be.read(op->bias, b);  // updated too (fp32, added after the GEMM)
    op->forward();
    be.read(op->y, y);
    const auto xr = rounded(x), wr = rounded(w);
    auto want = product(rows, in, out, [&](int64_t r, int64_t i) { return xr[r * in + i]; },
                        [&](int64_t i, int64_t o) { return wr[i * out + o]; });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) want[r * out + o] += b[o];
    check_accumulated(y, want, in, 0.5, "y after the update");
    // A write() of a parameter leaves the copy behind: the layers round their own again.
    be.write(op->bias, std::vector<float>(out, 0.0f));
    CHECK_FALSE(be.bf16_weights_current());
  }
}
