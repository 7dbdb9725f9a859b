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
// The op runs the same arithmetic as batched oneDNN matmuls over (batch
// row, head) on strided views of qkv, y and their gradients (no copies),
// with xrun's own causal softmax rows in float (a vectorised exp):
//   scores = q k^T; p = softmax(scores / sqrt(hs)) over u <= t, 0 beyond;
//   y = p v; dv = p^T dy; dp = dy v^T; ds = p (dp - sum_u p dp) / sqrt(hs);
//   dq = ds k; dk = ds^T q.
// Each [T, T] block is multiplied whole and its masked half zeroed: a GEMM
// over the square beats loops over the triangle. The double kernels above
// are its reference (tests/engine/attention_test.cpp).
#include <stdexcept>
#include <string>

#include "engine/cpu/bf16.h"
#include "engine/cpu/fast_exp.h"
#include "engine/cpu/matmul_call.h"

namespace xrun::cpu {
namespace {

using dt = memory::data_type;

// out[0..T) = row[0..T) rounded to bf16 (a row just written: in cache).
XRUN_VECTOR_CLONES
void row_to_bf16(const float* row, int64_t T, bf16_t* out) {
#pragma omp simd
  for (int64_t u = 0; u < T; ++u) out[u] = float_to_bf16(row[u]);
}

// softmax(scale * row[0..t]) in place, row[t+1..T) = 0; and the row
// rounded to bf16 into `copy` where given.
XRUN_VECTOR_CLONES
void causal_softmax_row(float* row, int64_t t, int64_t T, float scale, bf16_t* copy = nullptr) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t u = 0; u <= t; ++u) mx = row[u] > mx ? row[u] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t u = 0; u <= t; ++u) {
    row[u] = exp_vectorizable((row[u] - mx) * scale);
    sum += row[u];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t u = 0; u <= t; ++u) row[u] *= inv;
  for (int64_t u = t + 1; u < T; ++u) row[u] = 0.0f;
  if (copy) row_to_bf16(row, T, copy);
}

// ds = p (dp - sum_u p dp) scale over u <= t, in place of dp; 0 beyond;
// and ds rounded to bf16 into `copy` where given.
XRUN_VECTOR_CLONES
void causal_softmax_backward_row(const float* p, float* dp, int64_t t, int64_t T, float scale,
                                 bf16_t* copy = nullptr) {
  float w = 0;
#pragma omp simd reduction(+ : w)
  for (int64_t u = 0; u <= t; ++u) w += p[u] * dp[u];
#pragma omp simd
  for (int64_t u = 0; u <= t; ++u) dp[u] = p[u] * (dp[u] - w) * scale;
  for (int64_t u = t + 1; u < T; ++u) dp[u] = 0.0f;
  if (copy) row_to_bf16(dp, T, copy);
}

// What both attention ops share: the operands, the shape (of a plain fp32
// qkv [B*T, 3C]; std::logic_error otherwise), y and dy.
class CpuAttentionBase : public ActivationOp, public CpuOp {
 protected:
  CpuAttentionBase(CpuBackend& be, const std::string& name, CpuTensor* qkv, CpuTensor* dqkv,
                   int64_t batch, int64_t heads)
      : be_(be), qkv_(qkv), dqkv_(dqkv) {
    if (qkv->dims.size() != 2 || qkv->dims[1] % 3 != 0 || qkv->dtype != DType::f32 ||
        !is_plain(qkv->md) || qkv->dims[0] % batch != 0)
      throw std::logic_error(name + ": expects a plain fp32 qkv [B*T, 3C]");
    shape_ = {batch, qkv->dims[0] / batch, heads, qkv->dims[1] / 3};
    if (shape_.width % heads != 0) throw std::logic_error(name + ": width not a multiple of the heads");
    const int64_t rows = qkv->dims[0], c = shape_.width;
    y = be.declare(name + ".y", {rows, c}, plain_md({rows, c}), TensorRole::activation);
    dy = be.declare(name + ".dy", {rows, c}, plain_md({rows, c}), TensorRole::activation_grad);
  }
  static float* f(Tensor* t) { return static_cast<float*>(t->data); }
  // Every [T, T] row of p: the causal softmax of the scores in place (and
  // each row rounded to bf16 into `copy`, where given).
  void softmax_rows(float* p, bf16_t* copy) const {
    const int64_t T = shape_.tokens, pairs = shape_.batch * shape_.heads;
    const float scale = softmax_scale();
#pragma omp parallel for
    for (int64_t r = 0; r < pairs * T; ++r)
      causal_softmax_row(p + r * T, r % T, T, scale, copy ? copy + r * T : nullptr);
  }
  // Every row of ds: the softmax's backward in place of dp (and rounded to
  // bf16 into `copy`, where given).
  void softmax_backward_rows(const float* p, float* ds, bf16_t* copy) const {
    const int64_t T = shape_.tokens, pairs = shape_.batch * shape_.heads;
    const float scale = softmax_scale();
#pragma omp parallel for
    for (int64_t r = 0; r < pairs * T; ++r)
      causal_softmax_backward_row(p + r * T, ds + r * T, r % T, T, scale,
                                  copy ? copy + r * T : nullptr);
  }
  float softmax_scale() const { return 1.0f / std::sqrt(static_cast<float>(shape_.head_size())); }

  CpuBackend& be_;
  CpuTensor* qkv_;
  CpuTensor* dqkv_;
  AttentionShape shape_;
};

class CpuAttention final : public CpuAttentionBase {
 public:
  CpuAttention(CpuBackend& be, const std::string& name, CpuTensor* qkv, CpuTensor* dqkv,
               int64_t batch, int64_t heads)
      : CpuAttentionBase(be, name, qkv, dqkv, batch, heads) {
    const int64_t c = shape_.width, B = batch, H = heads;
    const int64_t T = shape_.tokens, hs = shape_.head_size();
    // The probabilities: kept between the passes up to the backend's limit
    // a layer; beyond it one buffer all layers share, refilled in the
    // backward pass.
    const std::vector<int64_t> block = {B, H, T, T};
    recompute_ = B * H * T * T * 4 > be.attention_keep_bytes;
    p_ = recompute_ ? be.shared_scratch("attention.p", block)
                    : be.declare(name + ".p", block, plain_md(block), TensorRole::workspace);
    if (dqkv) ds_ = be.shared_scratch("attention.ds", block);

    // Views: a head's rows of q, k or v inside qkv (or of y inside [B*T, C]).
    const auto heads_view = [&](int64_t row, bool transposed) {
      return transposed ? memory::desc({B, H, hs, T}, dt::f32, memory::dims{T * row, hs, 1, row})
                        : memory::desc({B, H, T, hs}, dt::f32, memory::dims{T * row, hs, row, 1});
    };
    const memory::desc qkv_rows = heads_view(3 * c, false), qkv_t = heads_view(3 * c, true);
    const memory::desc y_rows = heads_view(c, false);
    const memory::desc blk = plain_md({B, H, T, T});
    const memory::desc blk_t({B, H, T, T}, dt::f32, memory::dims{H * T * T, T * T, 1, T});
    scores_.make(be, "attention matmul", qkv_rows, qkv_t, blk);
    out_.make(be, "attention matmul", blk, qkv_rows, y_rows);
    if (dqkv) {
      dv_.make(be, "attention matmul", blk_t, y_rows, qkv_rows);
      dp_.make(be, "attention matmul", y_rows, qkv_t, blk);
      dq_.make(be, "attention matmul", blk, qkv_rows, qkv_rows);
      dk_.make(be, "attention matmul", blk_t, qkv_rows, qkv_rows);
    }
    be.note_kernel("attention softmax", recompute_ ? "xrun:causal_rows_recompute_p"
                                                   : "xrun:causal_rows_keep_p");
    be.register_op(this);
  }

  void bind() override {
    const int64_t c = shape_.width;
    float* qkv = f(qkv_);
    scores_.bind(be_, qkv, qkv + c, f(p_));
    out_.bind(be_, f(p_), qkv + 2 * c, f(y));
    if (dqkv_) {
      float* d = f(dqkv_);
      dv_.bind(be_, f(p_), f(dy), d + 2 * c);
      dp_.bind(be_, f(dy), qkv + 2 * c, f(ds_));
      dq_.bind(be_, f(ds_), qkv + c, d);
      dk_.bind(be_, f(ds_), qkv, d + c);
    }
  }

  void forward() override {
    probabilities();
    out_.run(be_);
  }

  void backward() override {
    if (!dqkv_) throw std::logic_error("attention: backward without dqkv");
    if (recompute_) probabilities();
    dv_.run(be_);
    dp_.run(be_);
    softmax_backward_rows(f(p_), f(ds_), nullptr);
    dq_.run(be_);
    dk_.run(be_);
  }

 private:

  void probabilities() {
    scores_.run(be_);
    softmax_rows(f(p_), nullptr);
  }

  bool recompute_ = false;
  CpuTensor* p_ = nullptr;
  CpuTensor* ds_ = nullptr;
  MatmulCall scores_, out_, dv_, dp_, dq_, dk_;
};

// ------------------------------------------------------------ bf16 --
// In bf16 runs the six products read bf16 operands and accumulate in fp32
// (as PyTorch's bf16 autocast runs scaled_dot_product_attention), on
// oneDNN's AMX kernels, which oneDNN 2.6 picks only for plain (heads
// contiguous) operands: q, k and v are copied out of qkv head by head into
// [B, H, T, hs] bf16 (kept for the backward pass), as dy is there. The
// softmax and its backward stay fp32 on fp32 scores; p and ds are rounded
// to bf16 for the products in the same row loops. dq, dk and dv go through
// a plain fp32 block, then into dqkv (oneDNN 2.6 has no AMX kernel writing
// into qkv's strided columns: it ran dq there in gemm:jit).

// dst [parts, B, H, T, hs] (bf16) = columns [part C, part C + C) of src's
// [B*T, row] rows, head by head.
XRUN_VECTOR_CLONES
void split_heads_bf16(const float* src, int64_t row, int64_t parts, const AttentionShape& s,
                      bf16_t* dst) {
  const int64_t B = s.batch, T = s.tokens, H = s.heads, C = s.width, hs = s.head_size();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t part = 0; part < parts; ++part)
        for (int64_t h = 0; h < H; ++h) {
          const float* in = src + (b * T + t) * row + part * C + h * hs;
          bf16_t* out = dst + (((part * B + b) * H + h) * T + t) * hs;
#pragma omp simd
          for (int64_t d = 0; d < hs; ++d) out[d] = float_to_bf16(in[d]);
        }
}

// Columns [0, parts C) of dst's [B*T, parts C] rows = src [parts, B, H,
// T, hs], head by head (the inverse of split_heads).
void merge_heads(const float* src, int64_t parts, const AttentionShape& s, float* dst) {
  const int64_t row = parts * s.width;
  const int64_t B = s.batch, T = s.tokens, H = s.heads, C = s.width, hs = s.head_size();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t part = 0; part < parts; ++part)
        for (int64_t h = 0; h < H; ++h)
          std::copy_n(src + (((part * B + b) * H + h) * T + t) * hs, hs,
                      dst + (b * T + t) * row + part * C + h * hs);
}

class CpuAttentionBf16 final : public CpuAttentionBase {
 public:
  CpuAttentionBf16(CpuBackend& be, const std::string& name, CpuTensor* qkv, CpuTensor* dqkv,
                   int64_t batch, int64_t heads)
      : CpuAttentionBase(be, name, qkv, dqkv, batch, heads) {
    const int64_t C = shape_.width, B = batch, H = heads;
    const int64_t T = shape_.tokens, hs = shape_.head_size();
    const std::vector<int64_t> heads_dims = {3, B, H, T, hs}, block = {B, H, T, T};
    qkv_heads_ = be.declare(name + ".qkv_heads", heads_dims, plain_md(heads_dims, dt::bf16),
                            TensorRole::activation);
    // p (fp32, the softmax's) and its bf16 copy: kept a layer up to the
    // backend's limit, else shared and refilled in the backward pass (the
    // copy then in the op scratch).
    recompute_ = B * H * T * T * 6 > be.attention_keep_bytes;
    p_ = recompute_ ? be.shared_scratch("attention.p", block)
                    : be.declare(name + ".p", block, plain_md(block), TensorRole::workspace);
    if (!recompute_)
      p_bf16_ = be.declare(name + ".p_bf16", block, plain_md(block, dt::bf16), TensorRole::workspace);
    if (dqkv) ds_ = be.shared_scratch("attention.ds", block);
    // The op scratch, live inside one call: dy's heads (bf16), ds's copy
    // (bf16), dq, dk and dv (fp32), then p's copy where not kept.
    const auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
    const int64_t heads_bf16 = aligned(B * T * C * 2), block_bf16 = aligned(B * H * T * T * 2);
    at_ds_ = heads_bf16;
    at_dqkv_ = at_ds_ + block_bf16;
    at_p_ = dqkv ? at_dqkv_ + aligned(3 * B * T * C * 4) : 0;
    be.need_op_scratch(static_cast<size_t>(at_p_ + (recompute_ ? block_bf16 : 0)));

    const memory::desc hd = plain_md({B, H, T, hs}, dt::bf16);
    const memory::desc hd_t({B, H, hs, T}, dt::bf16, memory::dims{H * T * hs, T * hs, 1, hs});
    const memory::desc hd_f32 = plain_md({B, H, T, hs});
    const memory::desc blk = plain_md(block), blk_bf16 = plain_md(block, dt::bf16);
    const memory::desc blk_bf16_t({B, H, T, T}, dt::bf16, memory::dims{H * T * T, T * T, 1, T});
    // y's heads inside its [B*T, C] rows.
    const memory::desc y_rows({B, H, T, hs}, dt::f32, memory::dims{T * C, hs, C, 1});
    scores_.make(be, "attention matmul", hd, hd_t, blk);
    out_.make(be, "attention matmul", blk_bf16, hd, y_rows);
    if (dqkv) {
      dv_.make(be, "attention matmul", blk_bf16_t, hd, hd_f32);
      dp_.make(be, "attention matmul", hd, hd_t, blk);
      dq_.make(be, "attention matmul", blk_bf16, hd, hd_f32);
      dk_.make(be, "attention matmul", blk_bf16_t, hd, hd_f32);
    }
    be.note_kernel("attention softmax", recompute_ ? "xrun:causal_rows_recompute_p_bf16"
                                                   : "xrun:causal_rows_keep_p_bf16");
    be.register_op(this);
  }

  void bind() override {
    const int64_t n = shape_.batch * shape_.tokens * shape_.width;  // one part of the heads
    const bf16_t* q = heads(), *k = q + n, *v = q + 2 * n;
    const bf16_t* pb = p_bf16();
    scores_.bind(be_, q, k, f(p_));
    out_.bind(be_, pb, v, f(y));
    if (dqkv_) {
      char* scratch = be_.op_scratch();
      const auto* dyh = reinterpret_cast<const bf16_t*>(scratch);
      const auto* dsb = reinterpret_cast<const bf16_t*>(scratch + at_ds_);
      float* d = reinterpret_cast<float*>(scratch + at_dqkv_);  // [dq; dk; dv]
      dv_.bind(be_, pb, dyh, d + 2 * n);
      dp_.bind(be_, dyh, v, f(ds_));
      dq_.bind(be_, dsb, k, d);
      dk_.bind(be_, dsb, q, d + n);
    }
  }

  void forward() override {
    split_heads_bf16(f(qkv_), 3 * shape_.width, 3, shape_, heads());
    probabilities();
    out_.run(be_);
  }

  void backward() override {
    if (!dqkv_) throw std::logic_error("attention: backward without dqkv");
    if (recompute_) probabilities();
    char* scratch = be_.op_scratch();
    split_heads_bf16(f(dy), shape_.width, 1, shape_, reinterpret_cast<bf16_t*>(scratch));
    dv_.run(be_);
    dp_.run(be_);
    softmax_backward_rows(f(p_), f(ds_), reinterpret_cast<bf16_t*>(scratch + at_ds_));
    dq_.run(be_);
    dk_.run(be_);
    merge_heads(reinterpret_cast<const float*>(scratch + at_dqkv_), 3, shape_, f(dqkv_));
  }

 private:
  bf16_t* heads() const { return static_cast<bf16_t*>(qkv_heads_->data); }
  bf16_t* p_bf16() const {
    return p_bf16_ ? static_cast<bf16_t*>(p_bf16_->data)
                   : reinterpret_cast<bf16_t*>(be_.op_scratch() + at_p_);
  }

  void probabilities() {
    scores_.run(be_);
    softmax_rows(f(p_), p_bf16());
  }

  bool recompute_ = false;
  CpuTensor* qkv_heads_ = nullptr;  // [3, B, H, T, hs] bf16
  CpuTensor* p_ = nullptr;
  CpuTensor* p_bf16_ = nullptr;     // null: p's copy in the op scratch
  CpuTensor* ds_ = nullptr;
  int64_t at_ds_ = 0, at_dqkv_ = 0, at_p_ = 0;  // byte offsets in the op scratch
  MatmulCall scores_, out_, dv_, dp_, dq_, dk_;
};

}  // namespace

std::unique_ptr<ActivationOp> make_causal_attention(CpuBackend& be, const std::string& name,
                                                    CpuTensor* qkv, CpuTensor* dqkv,
                                                    int64_t batch, int64_t heads) {
  if (be.precision() == Precision::bf16)
    return std::make_unique<CpuAttentionBf16>(be, name, qkv, dqkv, batch, heads);
  return std::make_unique<CpuAttention>(be, name, qkv, dqkv, batch, heads);
}

}  // namespace xrun::cpu
