// engine/cpu/matmul.cpp: GPT-2's linear layers on the CPU as oneDNN matmuls
// on plain row-major tensors (issue #25): transformers' Conv1D (y = x w + b,
// weight [in, out]) and the tied output layer (y = x wte^T, wte [V, C] owned
// by the embedding). The transposed operands of the backward passes are
// strided views of the same memory (no copies): dx = dy w^T, dw = x^T dy.
// The bias gradient is xrun's own column sum, in double (in bf16 runs the
// same pass rounds dy to bf16).
//
// In bf16 runs (AMX or AVX512_BF16) the GEMMs read bf16 operands and
// accumulate in fp32, as PyTorch's bf16 autocast runs a linear layer, on
// oneDNN's AMX kernels: the weights from the backend's bf16 copy of the
// parameter region (the optimizer writes it as it updates), the input's bf16
// copy made in the forward pass (read again by the weight gradient), the
// incoming gradient rounded to bf16 in the backend's op scratch for the
// two backward products; every
// tensor outside the GEMMs (activations, gradients, parameters) stays fp32.
#include <algorithm>
#include <stdexcept>

#include "engine/cpu/bf16.h"
#include "engine/cpu/matmul_call.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;
using dt = memory::data_type;

// A [rows, cols] view of memory that holds the [cols, rows] matrix row-major.
memory::desc transposed_md(int64_t rows, int64_t cols, dt type = dt::f32) {
  return memory::desc({rows, cols}, type, memory::dims{1, rows});
}

// dst = src rounded to bf16 (to nearest, ties to even), threads in parallel.
XRUN_VECTOR_CLONES
void round_to_bf16(const float* src, bf16_t* dst, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

// What a GEMM op keeps in a bf16 run: its input's bf16 copy and where its
// weight's lies in the backend's bf16 copy of the parameter region (the
// optimizer writes it as it updates; the op rounds its own slice when the
// region changed otherwise), with the weights_version() it was current at.
// Without them (fp32 runs) the GEMMs read the fp32 tensors themselves.
struct Bf16Operands {
  CpuTensor* x = nullptr;
  bf16_t* weight = nullptr;
  uint64_t weight_version = ~uint64_t{0};
  void declare(CpuBackend& be, const std::string& name, int64_t rows, int64_t in) {
    x = be.declare(name + ".x_bf16", {rows, in}, plain_md({rows, in}, dt::bf16),
                   TensorRole::activation);
    be.need_bf16_weights();
  }
  explicit operator bool() const { return x != nullptr; }
  // The operands the GEMMs read: the fp32 tensors, or their bf16 copies
  // (the incoming gradient's in the op scratch). Called from bind().
  void bind(CpuBackend& be, const Tensor* w) {
    if (x) weight = be.bf16_weights() + as_cpu(w)->offset / sizeof(float);
  }
  const void* input(const Tensor* in) const { return x ? x->data : in->data; }
  const void* weights(const Tensor* w) const { return x ? weight : w->data; }
  const void* gradient(const CpuBackend& be, const Tensor* dy) const {
    return x ? be.op_scratch() : dy->data;
  }
  // Before the forward GEMM: the weight's copy, rounded here where the
  // parameter changed since and the optimizer did not write it, and the input's.
  void before_forward(CpuBackend& be, const Tensor* w, const Tensor* in) {
    if (weight_version != be.weights_version()) {
      if (!be.bf16_weights_current())
        round_to_bf16(static_cast<const float*>(w->data), weight, w->numel());
      weight_version = be.weights_version();
    }
    round_to_bf16(static_cast<const float*>(in->data), static_cast<bf16_t*>(x->data), in->numel());
  }
  // Before the backward GEMMs: the incoming gradient's copy, in the op scratch.
  static void before_backward(CpuBackend& be, const Tensor* dy) {
    round_to_bf16(static_cast<const float*>(dy->data), reinterpret_cast<bf16_t*>(be.op_scratch()),
                  dy->numel());
  }
};

bool bf16_gemms(const CpuBackend& be) { return be.precision() == Precision::bf16; }

// db[o] = sum over rows of dy[r, o], in double, threads over column blocks;
// where dy_bf16 is given, dy rounded to bf16 into it in the same pass (the
// bf16 backward GEMMs' operand: one read of dy for both).
XRUN_VECTOR_CLONES
void column_sums(const float* dy, int64_t rows, int64_t cols, float* db, bf16_t* dy_bf16) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t o0 = blk * kBlock, n = std::min(kBlock, cols - o0);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols + o0;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += row[j];
      if (dy_bf16) {
        bf16_t* out = dy_bf16 + r * cols + o0;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) out[j] = float_to_bf16(row[j]);
      }
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
    const dt op = bf16_gemms(be) ? dt::bf16 : dt::f32;  // the GEMMs' operand type
    if (op == dt::bf16) {
      bf16_.declare(be, name, n_, in_);
      be.need_op_scratch(static_cast<size_t>(n_ * out_) * sizeof(bf16_t));
    }
    fwd_.make(be, "matmul fwd", plain_md({n_, in_}, op), plain_md({in_, out_}, op),
              plain_md({n_, out_}), &bias_md);
    bww_.make(be, "matmul bwd_weights", transposed_md(in_, n_, op), plain_md({n_, out_}, op),
              plain_md({in_, out_}));
    if (dx)
      bwd_.make(be, "matmul bwd_data", plain_md({n_, out_}, op), transposed_md(out_, in_, op),
                plain_md({n_, in_}));
    be.register_op(this);
  }
  void bind() override {
    bf16_.bind(be_, weight);
    const void *x = bf16_.input(x_), *w = bf16_.weights(weight), *g = bf16_.gradient(be_, dy);
    fwd_.bind(be_, x, w, y->data, bias->data);
    bww_.bind(be_, x, g, weight_grad->data);
    if (dx_) bwd_.bind(be_, g, w, dx_->data);
  }
  void forward() override {
    if (bf16_) bf16_.before_forward(be_, weight, x_);
    fwd_.run(be_);
  }
  void backward() override {
    // The bias gradient, and in bf16 runs dy's bf16 copy, in one pass.
    column_sums(static_cast<const float*>(dy->data), n_, out_, static_cast<float*>(bias_grad->data),
                bf16_ ? reinterpret_cast<bf16_t*>(be_.op_scratch()) : nullptr);
    bww_.run(be_);
    if (dx_) bwd_.run(be_);
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, in_, out_;
  Bf16Operands bf16_;  // bf16 runs only
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
    const dt op = bf16_gemms(be) ? dt::bf16 : dt::f32;
    if (op == dt::bf16) {
      bf16_.declare(be, name, n, c);
      be.need_op_scratch(static_cast<size_t>(n * v) * sizeof(bf16_t));
    }
    fwd_.make(be, "matmul fwd", plain_md({n, c}, op), transposed_md(c, v, op), plain_md({n, v}));
    bww_.make(be, "matmul bwd_weights", transposed_md(v, n, op), plain_md({n, c}, op),
              plain_md({v, c}));
    if (dx)
      bwd_.make(be, "matmul bwd_data", plain_md({n, v}, op), plain_md({v, c}, op),
                plain_md({n, c}));
    be.register_op(this);
  }
  void bind() override {
    bf16_.bind(be_, weight);
    const void *x = bf16_.input(x_), *w = bf16_.weights(weight), *g = bf16_.gradient(be_, dy);
    fwd_.bind(be_, x, w, y->data);
    bww_.bind(be_, g, x, weight_grad->data);
    if (dx_) bwd_.bind(be_, g, w, dx_->data);
  }
  void forward() override {
    if (bf16_) bf16_.before_forward(be_, weight, x_);
    fwd_.run(be_);
  }
  void backward() override {
    if (bf16_) Bf16Operands::before_backward(be_, dy);
    bww_.run(be_);
    if (dx_) bwd_.run(be_);
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  Bf16Operands bf16_;  // bf16 runs only
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
