// engine/cpu/matmul.cpp: GPT-2's linear layers on the CPU as oneDNN matmuls
// on plain row-major tensors (issue #25): transformers' Conv1D (y = x w + b,
// weight [in, out]) and the tied output layer (y = x wte^T, wte [V, C] owned
// by the embedding). The transposed operands of the backward passes are
// strided views of the same memory (no copies): dx = dy w^T, dw = x^T dy.
// The bias gradient is xrun's own column sum, in double.
#include <algorithm>
#include <stdexcept>

#include "engine/cpu/matmul_call.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;
using dt = memory::data_type;

// A [rows, cols] view of memory that holds the [cols, rows] matrix row-major.
memory::desc transposed_md(int64_t rows, int64_t cols) {
  return memory::desc({rows, cols}, dt::f32, memory::dims{1, rows});
}

// db[o] = sum over rows of dy[r, o], in double, threads over column blocks.
void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t o0 = blk * kBlock, n = std::min(kBlock, cols - o0);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols + o0;
      for (int64_t j = 0; j < n; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < n; ++j) db[o0 + j] = static_cast<float>(acc[j]);
  }
}

void check_plain_rows(const std::string& name, const Tensor* x) {
  if (x->dims.size() != 2 || x->dtype != DType::f32 || !is_plain(as_cpu(x)->md))
    throw std::logic_error(name + ": expects a plain fp32 [rows, C] input, got " + x->name);
}

// Conv1D: y[N, O] = x[N, I] w[I, O] + b.
class CpuLinearInOut final : public LinearOp, public CpuOp {
 public:
  CpuLinearInOut(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx, int64_t out)
      : be_(be), x_(x), dx_(dx) {
    check_plain_rows(name, x);
    n_ = x->dims[0], in_ = x->dims[1], out_ = out;
    auto [w, wg] = be.declare_parameter(name + ".weight", {in_, out_}, plain_md({in_, out_}));
    auto [b, bg] = be.declare_parameter(name + ".bias", {out_}, plain_md({out_}));
    weight = w, weight_grad = wg, bias = b, bias_grad = bg;
    y = be.declare(name + ".y", {n_, out_}, plain_md({n_, out_}), TensorRole::activation);
    dy = be.declare(name + ".dy", {n_, out_}, plain_md({n_, out_}), TensorRole::activation_grad);
    const memory::desc bias_md = plain_md({1, out_});
    fwd_.make(be, "matmul fwd", plain_md({n_, in_}), plain_md({in_, out_}), plain_md({n_, out_}),
              &bias_md);
    bww_.make(be, "matmul bwd_weights", transposed_md(in_, n_), plain_md({n_, out_}),
              plain_md({in_, out_}));
    if (dx)
      bwd_.make(be, "matmul bwd_data", plain_md({n_, out_}), transposed_md(out_, in_),
                plain_md({n_, in_}));
    be.register_op(this);
  }
  void bind() override {
    fwd_.bind(be_, x_->data, weight->data, y->data, bias->data);
    bww_.bind(be_, x_->data, dy->data, weight_grad->data);
    if (dx_) bwd_.bind(be_, dy->data, weight->data, dx_->data);
  }
  void forward() override { fwd_.run(be_); }
  void backward() override {
    bww_.run(be_);
    column_sums(static_cast<const float*>(dy->data), n_, out_, static_cast<float*>(bias_grad->data));
    if (dx_) bwd_.run(be_);
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, in_, out_;
  MatmulCall fwd_, bww_, bwd_;
};

// The tied output layer: y[N, V] = x[N, C] wte[V, C]^T.
class CpuLinearTied final : public LinearOp, public CpuOp {
 public:
  CpuLinearTied(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx,
                Tensor* w, Tensor* wg)
      : be_(be), x_(x), dx_(dx) {
    check_plain_rows(name, x);
    if (w->dims.size() != 2 || w->dims[1] != x->dims[1] || !is_plain(as_cpu(w)->md))
      throw std::logic_error(name + ": the tied weight must be plain [V, C]");
    const int64_t n = x->dims[0], c = x->dims[1], v = w->dims[0];
    weight = w, weight_grad = wg;
    y = be.declare(name + ".y", {n, v}, plain_md({n, v}), TensorRole::activation);
    dy = be.declare(name + ".dy", {n, v}, plain_md({n, v}), TensorRole::activation_grad);
    fwd_.make(be, "matmul fwd", plain_md({n, c}), transposed_md(c, v), plain_md({n, v}));
    bww_.make(be, "matmul bwd_weights", transposed_md(v, n), plain_md({n, c}), plain_md({v, c}));
    if (dx) bwd_.make(be, "matmul bwd_data", plain_md({n, v}), plain_md({v, c}), plain_md({n, c}));
    be.register_op(this);
  }
  void bind() override {
    fwd_.bind(be_, x_->data, weight->data, y->data);
    bww_.bind(be_, dy->data, x_->data, weight_grad->data);
    if (dx_) bwd_.bind(be_, dy->data, weight->data, dx_->data);
  }
  void forward() override { fwd_.run(be_); }
  void backward() override {
    bww_.run(be_);
    if (dx_) bwd_.run(be_);
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  MatmulCall fwd_, bww_, bwd_;
};

}  // namespace

std::unique_ptr<LinearOp> make_linear_in_out(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, int64_t out_features) {
  return std::make_unique<CpuLinearInOut>(be, name, x, dx, out_features);
}

std::unique_ptr<LinearOp> make_linear_tied(CpuBackend& be, const std::string& name, CpuTensor* x,
                                           CpuTensor* dx, Tensor* weight, Tensor* weight_grad) {
  return std::make_unique<CpuLinearTied>(be, name, x, dx, weight, weight_grad);
}

}  // namespace xrun::cpu
