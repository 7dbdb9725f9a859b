// tests/engine/attention_test.cpp: GPT-2's causal attention kernels on the
// CPU (engine/cpu/attention.h) against a float64 reference written here as
// transformers writes it (full score matrix, the future masked to -inf, a
// softmax over the whole row): y and the probabilities; the gradient of
// every qkv element against central differences of that float64 forward
// pass (no formula judging itself), with p kept or recomputed in the
// backward pass; and causality: a change at the last
// position leaves every earlier output as it was, bit for bit. The
// backend's op (oneDNN matmuls) against these kernels, in fp32 and in bf16
// (within bf16's rounding).
#include "catch2_compat.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/cpu_backend.h"
#include "op_test_util.h"
#include "skip.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

std::vector<float> values(const std::string& name, int64_t n, double scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(scale * testing::hashed_uniform(testing::name_seed(name), i));
  return v;
}

// float64 attention as GPT2Attention computes it: y [B*T, C], p [B, H, T, T].
void reference(const cpu::AttentionShape& s, const std::vector<double>& qkv,
               std::vector<double>& y, std::vector<double>& p) {
  const int64_t T = s.tokens, C = s.width, hs = s.head_size();
  y.assign(s.batch * T * C, 0.0);
  p.assign(s.batch * s.heads * T * T, 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> row(T);
        for (int64_t u = 0; u < T; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d)
            dot += qkv[(b * T + t) * 3 * C + h * hs + d] * qkv[(b * T + u) * 3 * C + C + h * hs + d];
          row[u] = u <= t ? dot / std::sqrt(static_cast<double>(hs))
                          : -std::numeric_limits<double>::infinity();
        }
        double mx = row[0], sum = 0;
        for (double r : row) mx = std::max(mx, r);
        for (double& r : row) sum += (r = std::exp(r - mx));
        for (int64_t u = 0; u < T; ++u) {
          const double w = row[u] / sum;
          p[((b * s.heads + h) * T + t) * T + u] = w;
          for (int64_t d = 0; d < hs; ++d)
            y[(b * T + t) * C + h * hs + d] += w * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + d];
        }
      }
}

}  // namespace

TEST_CASE("attention: forward against float64, gradients against central differences",
          "[attention]") {
  const cpu::AttentionShape s{2, 5, 2, 8};  // B, T, H, C: head size 4
  const int64_t n_qkv = s.batch * s.tokens * 3 * s.width, n_y = s.batch * s.tokens * s.width;
  const std::vector<float> qkv = values("attn.qkv", n_qkv, 1.5);
  const std::vector<float> dy = values("attn.dy", n_y, 1.0);
  std::vector<float> y(n_y), p(s.batch * s.heads * s.tokens * s.tokens);
  cpu::causal_attention_forward(s, qkv.data(), y.data(), p.data());
  std::vector<double> y_ref, p_ref;
  const std::vector<double> qkv64(qkv.begin(), qkv.end());
  reference(s, qkv64, y_ref, p_ref);
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(y_ref[i]).margin(2e-7));
  for (size_t i = 0; i < p.size(); ++i) CHECK(p[i] == Approx(p_ref[i]).margin(1e-7));

  std::vector<float> dqkv(n_qkv);
  cpu::causal_attention_backward(s, qkv.data(), p.data(), dy.data(), dqkv.data());
  // L = sum dy * y; dL/dqkv_i by central differences of the float64 forward.
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < n_qkv; ++i) {
    const double h = 1e-6;
    std::vector<double> plus = qkv64, minus = qkv64, yp, ym, unused;
    plus[i] += h, minus[i] -= h;
    reference(s, plus, yp, unused);
    reference(s, minus, ym, unused);
    double lp = 0, lm = 0;
    for (int64_t j = 0; j < n_y; ++j) lp += dy[j] * yp[j], lm += dy[j] * ym[j];
    const double fd = (lp - lm) / (2 * h);
    worst = std::max(worst, std::abs(dqkv[i] - fd));
    largest = std::max(largest, std::abs(fd));
  }
  INFO("largest gradient " << largest << ", worst difference " << worst);
  CHECK(largest > 0.1);  // the gradients are not all (near) zero
  CHECK(worst < 1e-6 * largest + 1e-7);

  // Without p kept: the forward pass writes y alone (the same bits) and the
  // backward pass recomputes p in double, which can only be closer.
  std::vector<float> y2(n_y), dqkv2(n_qkv);
  cpu::causal_attention_forward(s, qkv.data(), y2.data(), nullptr);
  CHECK(y2 == y);
  cpu::causal_attention_backward(s, qkv.data(), nullptr, dy.data(), dqkv2.data());
  double apart = 0;
  for (int64_t i = 0; i < n_qkv; ++i)
    apart = std::max(apart, static_cast<double>(std::abs(dqkv2[i] - dqkv[i])));
  CHECK(apart < 1e-6 * largest);
  CHECK(apart > 0);  // it did recompute (the float p rounds differently)
}

TEST_CASE("attention: an output never sees a later position", "[attention]") {
  const cpu::AttentionShape s{1, 6, 3, 12};
  std::vector<float> qkv = values("attn.causal", s.tokens * 3 * s.width, 1.0);
  std::vector<float> y(s.tokens * s.width), p(s.heads * s.tokens * s.tokens);
  cpu::causal_attention_forward(s, qkv.data(), y.data(), p.data());
  std::vector<float> changed = qkv;  // the last position's q, k and v
  for (int64_t j = 0; j < 3 * s.width; ++j) changed[(s.tokens - 1) * 3 * s.width + j] += 0.5f;
  std::vector<float> y2(y.size()), p2(p.size());
  cpu::causal_attention_forward(s, changed.data(), y2.data(), p2.data());
  for (int64_t t = 0; t + 1 < s.tokens; ++t)
    for (int64_t c = 0; c < s.width; ++c) CHECK(y2[t * s.width + c] == y[t * s.width + c]);
  bool last_moved = false;
  for (int64_t c = 0; c < s.width; ++c) last_moved |= y2[(s.tokens - 1) * s.width + c] != y[(s.tokens - 1) * s.width + c];
  CHECK(last_moved);
  // Each probability row sums to 1 over the positions it may see.
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t t = 0; t < s.tokens; ++t) {
      double sum = 0;
      for (int64_t u = 0; u < s.tokens; ++u) {
        const float w = p[(h * s.tokens + t) * s.tokens + u];
        if (u > t) CHECK(w == 0.0f);
        sum += w;
      }
      CHECK(sum == Approx(1.0).margin(1e-6));
    }
}

namespace {

struct OpRun {
  std::vector<float> y, dqkv;
};

// The backend's attention op (precision, probabilities kept or recomputed)
// forward and backward on qkv and dy.
OpRun run_op(const cpu::AttentionShape& s, Precision precision, bool recompute,
             const std::vector<float>& qkv, const std::vector<float>& dy) {
  const int64_t rows = s.batch * s.tokens, C = s.width;
  cpu::CpuBackend be(2, precision);
  if (recompute) be.attention_keep_bytes = 0;
  Tensor* x = be.declare("qkv", {rows, 3 * C}, cpu::plain_md({rows, 3 * C}), TensorRole::activation);
  Tensor* dx = be.declare("dqkv", {rows, 3 * C}, cpu::plain_md({rows, 3 * C}),
                          TensorRole::activation_grad);
  auto op = be.causal_attention("attn", x, dx, s.batch, s.heads);
  be.allocate();
  be.write(x, qkv);
  op->forward();
  OpRun r{std::vector<float>(rows * C), std::vector<float>(rows * 3 * C)};
  be.read(op->y, r.y);
  be.write(op->dy, dy);
  op->backward();
  be.read(dx, r.dqkv);
  return r;
}

// A shape, its inputs and the double kernels' outputs on them.
struct Reference {
  cpu::AttentionShape s{2, 33, 3, 24};  // T not a multiple of any vector width
  int64_t rows = s.batch * s.tokens, C = s.width;
  std::vector<float> qkv = values("op.qkv", rows * 3 * C, 2.0);
  std::vector<float> dy = values("op.dy", rows * C, 1.0);
  std::vector<float> y = std::vector<float>(rows * C), dqkv = std::vector<float>(rows * 3 * C);
  Reference() {
    cpu::causal_attention_forward(s, qkv.data(), y.data(), nullptr);
    cpu::causal_attention_backward(s, qkv.data(), nullptr, dy.data(), dqkv.data());
  }
};

}  // namespace

// The op (batched oneDNN matmuls on strided views, float softmax rows)
// against the double kernels above, probabilities kept and recomputed.
TEST_CASE("attention op: the CPU backend's matmul attention meets the double kernels",
          "[attention]") {
  const Reference ref;
  const std::vector<float>&y_ref = ref.y, &dqkv_ref = ref.dqkv;
  for (const bool recompute : {false, true}) {
    INFO((recompute ? "probabilities recomputed" : "probabilities kept"));
    const auto [y, dqkv] = run_op(ref.s, Precision::fp32, recompute, ref.qkv, ref.dy);
    double y_err = 0, d_err = 0, d_max = 0;
    for (size_t i = 0; i < y.size(); ++i) y_err = std::max<double>(y_err, std::abs(y[i] - y_ref[i]));
    for (size_t i = 0; i < dqkv.size(); ++i) {
      d_err = std::max<double>(d_err, std::abs(dqkv[i] - dqkv_ref[i]));
      d_max = std::max<double>(d_max, std::abs(dqkv_ref[i]));
    }
    INFO("y error " << y_err << ", dqkv error " << d_err << " of " << d_max);
    CHECK(y_err < 2e-6);  // values up to 2: float sums of 24 products
    CHECK(d_err < 2e-6 * d_max);
  }
}

// Past attention_keep_bytes every layer's probabilities share one buffer:
// each layer's backward pass must refill it from its own q and k, not take
// the last forward pass's. Two layers on one backend, run as a model runs
// them (forward 1, forward 2, backward 2, backward 1), against each alone.
TEST_CASE("attention op: layers sharing the recomputed probabilities each take their own in the "
          "backward pass",
          "[attention]") {
  const Reference ref;
  const cpu::AttentionShape s = ref.s;
  const int64_t rows = ref.rows, C = ref.C;
  const std::vector<float> qkv2 = values("op.qkv2", rows * 3 * C, 2.0);
  const std::vector<float> dy2 = values("op.dy2", rows * C, 1.0);
  std::vector<Precision> precisions = {Precision::fp32};
  if (optest::no_cpu_bf16_kernels().empty()) precisions.push_back(Precision::bf16);
  for (const Precision precision : precisions) {
    INFO(to_string(precision));
    const OpRun alone1 = run_op(s, precision, true, ref.qkv, ref.dy);
    const OpRun alone2 = run_op(s, precision, true, qkv2, dy2);
    cpu::CpuBackend be(2, precision);
    be.attention_keep_bytes = 0;
    const auto declare = [&](const std::string& name, int64_t width, TensorRole role) {
      return be.declare(name, {rows, width}, cpu::plain_md({rows, width}), role);
    };
    Tensor* x1 = declare("qkv1", 3 * C, TensorRole::activation);
    Tensor* dx1 = declare("dqkv1", 3 * C, TensorRole::activation_grad);
    Tensor* x2 = declare("qkv2", 3 * C, TensorRole::activation);
    Tensor* dx2 = declare("dqkv2", 3 * C, TensorRole::activation_grad);
    auto op1 = be.causal_attention("attn1", x1, dx1, s.batch, s.heads);
    auto op2 = be.causal_attention("attn2", x2, dx2, s.batch, s.heads);
    be.allocate();
    be.write(x1, ref.qkv);
    be.write(x2, qkv2);
    op1->forward();
    op2->forward();
    be.write(op2->dy, dy2);
    op2->backward();
    be.write(op1->dy, ref.dy);
    op1->backward();
    std::vector<float> d1(rows * 3 * C), d2(rows * 3 * C);
    be.read(dx1, d1);
    be.read(dx2, d2);
    CHECK(d2 == alone2.dqkv);
    CHECK(d1 == alone1.dqkv);  // not layer 2's probabilities
  }
}

// In bf16 runs the op multiplies bf16 copies of q, k, v, p, dy and ds (heads
// made contiguous for oneDNN's AMX kernels), accumulating in fp32.
TEST_CASE("attention op in bf16: the products on bf16 operands stay within bf16's rounding "
          "of float64",
          "[attention][bf16]") {
  if (const std::string why = optest::no_cpu_bf16_kernels(); !why.empty()) XRUN_SKIP(why);
  const Reference ref;
  const int64_t C = ref.C;
  // dqkv's q, k and v columns apart: a mix-up of two of them shows in one.
  const auto part = [&](const std::vector<float>& d, int64_t which) {
    std::vector<float> out;
    for (int64_t r = 0; r < ref.rows; ++r)
      out.insert(out.end(), d.begin() + r * 3 * C + which * C, d.begin() + r * 3 * C + which * C + C);
    return out;
  };
  for (const bool recompute : {false, true}) {
    INFO((recompute ? "probabilities recomputed" : "probabilities kept"));
    const auto [y, dqkv] = run_op(ref.s, Precision::bf16, recompute, ref.qkv, ref.dy);
    // bf16 operands (8 significant bits) give each product a relative error
    // of a few 2^-9: NMSE 0.5e-5 to 1.5e-5 here against float64 (a softmax
    // scale 1% off reads 5e-5 to 6e-5); fp32 operands give about 1e-13 (so
    // a product left in fp32 shows as too small an error).
    const std::pair<std::string, double> errors[] = {
        {"y", optest::nmse(y, ref.y)},
        {"dq", optest::nmse(part(dqkv, 0), part(ref.dqkv, 0))},
        {"dk", optest::nmse(part(dqkv, 1), part(ref.dqkv, 1))},
        {"dv", optest::nmse(part(dqkv, 2), part(ref.dqkv, 2))}};
    for (const auto& [what, e] : errors) {
      INFO(what << ": NMSE " << e << " against float64");
      CHECK(e > 1e-9);
      CHECK(e < 3e-5);
    }
  }
}
