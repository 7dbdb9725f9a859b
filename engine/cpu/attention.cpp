// engine/cpu/attention.cpp: see attention.h. The (batch, head) pairs in
// parallel; within one, plain loops over the causal triangle in double.
// Quadratic in T per pair with a [T, T] probability block kept: what a
// first, exact CPU attention is; a tiled (FlashAttention-style) kernel that
// recomputes p can replace it behind the same functions.
#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace xrun::cpu {

namespace {

// Column offsets of head h's q, k and v in a qkv row of 3C.
struct HeadColumns {
  int64_t q, k, v;
};
HeadColumns columns(const AttentionShape& s, int64_t h) {
  const int64_t hs = s.head_size();
  return {h * hs, s.width + h * hs, 2 * s.width + h * hs};
}

// Row t of one (batch row, head) pair's probabilities, positions 0..t, in
// double: softmax(q_t k_u / sqrt(hs)) over u <= t. `base` is the pair's
// batch row of qkv.
void probability_row(const float* base, const HeadColumns& col, int64_t row, int64_t hs,
                     int64_t t, double scale, double* w) {
  const float* q = base + t * row + col.q;
  double mx = -INFINITY;
  for (int64_t u = 0; u <= t; ++u) {
    const float* k = base + u * row + col.k;
    double dot = 0;
    for (int64_t d = 0; d < hs; ++d) dot += static_cast<double>(q[d]) * k[d];
    w[u] = dot * scale;
    mx = std::max(mx, w[u]);
  }
  double sum = 0;
  for (int64_t u = 0; u <= t; ++u) sum += (w[u] = std::exp(w[u] - mx));
  for (int64_t u = 0; u <= t; ++u) w[u] /= sum;
}

double score_scale(const AttentionShape& s) {
  return 1.0 / std::sqrt(static_cast<double>(s.head_size()));
}

// f(b, h) for every (batch row, head) pair, the pairs in parallel.
template <class F>
void for_each_pair(const AttentionShape& s, F&& f) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) f(b, h);
}

}  // namespace

void causal_attention_forward(const AttentionShape& s, const float* qkv, float* y, float* p) {
  const int64_t T = s.tokens, C = s.width, hs = s.head_size(), row = 3 * C;
  const double scale = score_scale(s);
  for_each_pair(s, [&](int64_t b, int64_t h) {
    const HeadColumns col = columns(s, h);
    const float* base = qkv + b * T * row;
    float* pb = p ? p + (b * s.heads + h) * T * T : nullptr;
    std::vector<double> w(T), out(hs);
    for (int64_t t = 0; t < T; ++t) {
      probability_row(base, col, row, hs, t, scale, w.data());
      std::fill(out.begin(), out.end(), 0.0);
      for (int64_t u = 0; u <= t; ++u) {
        const float* v = base + u * row + col.v;
        for (int64_t d = 0; d < hs; ++d) out[d] += w[u] * v[d];
      }
      if (pb) {
        float* pr = pb + t * T;
        for (int64_t u = 0; u <= t; ++u) pr[u] = static_cast<float>(w[u]);
        std::fill(pr + t + 1, pr + T, 0.0f);
      }
      float* yr = y + (b * T + t) * C + h * hs;
      for (int64_t d = 0; d < hs; ++d) yr[d] = static_cast<float>(out[d]);
    }
  });
}

void causal_attention_backward(const AttentionShape& s, const float* qkv, const float* p,
                               const float* dy, float* dqkv) {
  const int64_t T = s.tokens, C = s.width, hs = s.head_size(), row = 3 * C;
  const double scale = score_scale(s);
  for_each_pair(s, [&](int64_t b, int64_t h) {
    const HeadColumns col = columns(s, h);
    const float* base = qkv + b * T * row;
    const float* pb = p ? p + (b * s.heads + h) * T * T : nullptr;
    // This pair's gradients, summed in double, written once at the end
    // (each (b, h) owns its columns of dqkv: no two threads share one).
    std::vector<double> dq(T * hs, 0.0), dk(T * hs, 0.0), dv(T * hs, 0.0), ds(T), pr(T);
    for (int64_t t = 0; t < T; ++t) {
      const float* dyr = dy + (b * T + t) * C + h * hs;
      if (pb)
        std::copy(pb + t * T, pb + t * T + t + 1, pr.begin());
      else  // recomputed: no [T, T] block kept between the passes
        probability_row(base, col, row, hs, t, scale, pr.data());
      double weighted = 0;  // sum_u p[t, u] dp[t, u]
      for (int64_t u = 0; u <= t; ++u) {
        const float* v = base + u * row + col.v;
        double dp = 0;
        for (int64_t d = 0; d < hs; ++d) {
          dp += static_cast<double>(dyr[d]) * v[d];
          dv[u * hs + d] += pr[u] * dyr[d];
        }
        ds[u] = dp;
        weighted += pr[u] * dp;
      }
      const float* q = base + t * row + col.q;
      for (int64_t u = 0; u <= t; ++u) {
        const double g = pr[u] * (ds[u] - weighted) * scale;  // dscores, scaled
        const float* k = base + u * row + col.k;
        for (int64_t d = 0; d < hs; ++d) {
          dq[t * hs + d] += g * k[d];
          dk[u * hs + d] += g * q[d];
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      float* out = dqkv + (b * T + t) * row;
      for (int64_t d = 0; d < hs; ++d) {
        out[col.q + d] = static_cast<float>(dq[t * hs + d]);
        out[col.k + d] = static_cast<float>(dk[t * hs + d]);
        out[col.v + d] = static_cast<float>(dv[t * hs + d]);
      }
    }
  });
}

}  // namespace xrun::cpu

// ------------------------------------------------------------ the op --
#include <stdexcept>
#include <string>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {
namespace {

// The probabilities are kept between the passes while they take at most
// this much a layer; beyond it (long contexts) the backward pass recomputes
// them.
constexpr int64_t kKeepProbabilitiesBytes = int64_t{64} << 20;

class CpuAttention final : public ActivationOp {
 public:
  CpuAttention(CpuBackend& be, const std::string& name, CpuTensor* qkv, CpuTensor* dqkv,
               int64_t batch, int64_t heads)
      : qkv_(qkv), dqkv_(dqkv) {
    if (qkv->dims.size() != 2 || qkv->dims[1] % 3 != 0 || qkv->dtype != DType::f32 ||
        !is_plain(qkv->md) || qkv->dims[0] % batch != 0)
      throw std::logic_error(name + ": expects a plain fp32 qkv [B*T, 3C]");
    shape_ = {batch, qkv->dims[0] / batch, heads, qkv->dims[1] / 3};
    if (shape_.width % heads != 0)
      throw std::logic_error(name + ": width not a multiple of the heads");
    const int64_t rows = qkv->dims[0], c = shape_.width;
    y = be.declare(name + ".y", {rows, c}, plain_md({rows, c}), TensorRole::activation);
    dy = be.declare(name + ".dy", {rows, c}, plain_md({rows, c}), TensorRole::activation_grad);
    const int64_t t = shape_.tokens;
    if (batch * heads * t * t * 4 <= kKeepProbabilitiesBytes)
      p_ = be.declare(name + ".p", {batch, heads, t, t}, plain_md({batch, heads, t, t}),
                      TensorRole::workspace);
    be.note_kernel("attention", p_ ? "xrun:causal_double_keep_p" : "xrun:causal_double_recompute_p");
  }
  void forward() override {
    causal_attention_forward(shape_, f(qkv_), f(y), p_ ? f(p_) : nullptr);
  }
  void backward() override {
    if (!dqkv_) throw std::logic_error("attention: backward without dqkv");
    causal_attention_backward(shape_, f(qkv_), p_ ? f(p_) : nullptr, f(dy), f(dqkv_));
  }

 private:
  static float* f(Tensor* t) { return static_cast<float*>(t->data); }
  CpuTensor* qkv_;
  CpuTensor* dqkv_;
  AttentionShape shape_;
  CpuTensor* p_ = nullptr;
};

}  // namespace

std::unique_ptr<ActivationOp> make_causal_attention(CpuBackend& be, const std::string& name,
                                                    CpuTensor* qkv, CpuTensor* dqkv,
                                                    int64_t batch, int64_t heads) {
  return std::make_unique<CpuAttention>(be, name, qkv, dqkv, batch, heads);
}

}  // namespace xrun::cpu
