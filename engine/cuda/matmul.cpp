// engine/cuda/matmul.cpp: GPT-2's GEMM layers on cuBLAS, on Tensor Cores in
// tf32 (CUBLAS_COMPUTE_32F_FAST_TF32), fp16 and bf16 (half operands, fp32
// accumulation), plain fp32 otherwise: Conv1D (y = x W + b, W [in, out] as
// transformers keeps it) and the tied output layer (y = x wte^T, reading the
// embedding's table). Row-major products as column-major GEMMs: a row-major
// [r, c] matrix is a column-major [c, r] one, so y = x W is y^T = W^T x^T.
// The weights a GEMM reads are the half copies in fp16/bf16 runs, and the
// weight gradients it writes go to the half mirror (the optimizer reads
// fp32 part + half part); biases and their gradients are fp32.
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

int i32(int64_t v) { return static_cast<int>(v); }

const void* gemm_weights(const Tensor* weight) {
  const CudaTensor* w = as_cuda(weight);
  return w->has_half ? w->half_weights : w->data;
}
void* gemm_weight_grad(Tensor* grad) {
  CudaTensor* g = as_cuda(grad);
  return g->has_half ? g->half_grad : g->data;
}

// C (m x n, column-major, ldc) = alpha op(A) op(B), in the run's GEMM type.
void gemm(CudaBackend& be, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
          int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, void* c, int64_t ldc,
          float alpha = 1.0f) {
  const float zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(be.cublas(), ta, tb, i32(m), i32(n), i32(k), &alpha, a, be.gemm_type(),
                            i32(lda), b, be.gemm_type(), i32(ldb), &zero, c, be.gemm_type(),
                            i32(ldc), be.gemm_compute(), CUBLAS_GEMM_DEFAULT));
}

void check_rows(const std::string& name, const CudaTensor* x) {
  if (x->dims.size() != 2 || x->layout != Layout::nhwc || x->c_pad != x->dims[1])
    throw std::logic_error(name + ": expects a plain [rows, C] activation, got " + x->name);
}

// y[rows, O] = x[rows, I] W[I, O] + b.
class CudaLinearInOut final : public LinearOp {
 public:
  CudaLinearInOut(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx,
                  int64_t out)
      : be_(be), x_(x), dx_(dx), out_(out) {
    check_rows(name, x);
    rows_ = x->dims[0], in_ = x->dims[1];
    auto [w, wg] = be.declare_parameter(name + ".weight", {in_, out}, Layout::plain, 0, true);
    auto [b, bg] = be.declare_parameter(name + ".bias", {out}, Layout::plain, 0, false);
    weight = w, weight_grad = wg, bias = b, bias_grad = bg;
    y = be.declare_activation(name + ".y", {rows_, out}, out, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {rows_, out}, out, TensorRole::activation_grad);
    be.need_workspace(size_t{32} << 20);  // cuBLAS on Hopper wants 32 MiB
    be.need_scratch(static_cast<size_t>(column_chunks(rows_) * out) * sizeof(float));  // bias_grad
  }

  void forward() override {
    // y^T [O, rows] = W^T [O, I] x^T [I, rows]; W^T is W's storage read column-major.
    gemm(be_, CUBLAS_OP_N, CUBLAS_OP_N, out_, rows_, in_, gemm_weights(weight), out_, x_->data,
         in_, y->data, out_);
    add_bias(y->data, be_.activation_type(), static_cast<const float*>(bias->data), rows_, out_,
             be_.stream());
  }

  void backward() override {
    // dW^T [O, I] = dy^T [O, rows] x [rows, I]
    gemm(be_, CUBLAS_OP_N, CUBLAS_OP_T, out_, in_, rows_, dy->data, out_, x_->data, in_,
         gemm_weight_grad(weight_grad), out_);
    cuda::bias_grad(dy->data, be_.activation_type(), static_cast<float*>(bias_grad->data), rows_,
                    out_, static_cast<float*>(be_.scratch()), be_.stream());
    if (!dx_) return;
    // dx^T [I, rows] = W [I, O] dy^T [O, rows]
    gemm(be_, CUBLAS_OP_T, CUBLAS_OP_N, in_, rows_, out_, gemm_weights(weight), out_, dy->data,
         out_, dx_->data, in_);
  }

 private:
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  int64_t rows_ = 0, in_ = 0, out_ = 0;
};

// y[rows, V] = x[rows, C] wte[V, C]^T, no bias; wte's gradient written.
// wte is stored with its rows padded to Vp (zero; gpt2_pointwise.cpp) and
// the GEMMs run over all Vp: y and dy are [rows, V] stored with Vp columns
// (c_pad), the loss writing zero gradients into the padded ones, so the
// padded rows' gradient stays zero.
class CudaLinearTied final : public LinearOp {
 public:
  CudaLinearTied(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx,
                 CudaTensor* w, CudaTensor* wg)
      : be_(be), x_(x), dx_(dx) {
    check_rows(name, x);
    if (w->dims.size() != 2 || w->dims[1] != x->dims[1] || w->layout != Layout::plain)
      throw std::logic_error(name + ": the tied weight is not [V, C] for this input");
    if (!w->has_half && be.half())
      throw std::logic_error(name + ": the tied weight has no half copy for the GEMM");
    rows_ = x->dims[0], c_ = x->dims[1];
    const int64_t vocab = w->dims[0];
    v_ = vocab + w->pad_rows;  // the GEMMs' V: the stored rows
    weight = w, weight_grad = wg;
    y = be.declare_activation(name + ".y", {rows_, vocab}, v_, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {rows_, vocab}, v_, TensorRole::activation_grad);
    be.need_workspace(size_t{32} << 20);
  }

  void forward() override {
    // y^T [V, rows] = wte [V, C] x^T [C, rows]: wte's storage read column-major is wte^T.
    gemm(be_, CUBLAS_OP_T, CUBLAS_OP_N, v_, rows_, c_, gemm_weights(weight), c_, x_->data, c_,
         y->data, v_);
  }

  void backward() override {
    // dwte^T [C, V] = x^T [C, rows] dy [rows, V]
    gemm(be_, CUBLAS_OP_N, CUBLAS_OP_T, c_, v_, rows_, x_->data, c_, dy->data, v_,
         gemm_weight_grad(weight_grad), c_);
    // In fp16/bf16 runs that went to the half mirror: the fp32 part, which
    // the embedding's backward pass adds to next, starts from zero.
    CudaTensor* g = as_cuda(weight_grad);
    if (g->has_half) CUDA_CHECK(cudaMemsetAsync(g->data, 0, g->bytes, be_.stream()));
    if (!dx_) return;
    // dx^T [C, rows] = wte^T [C, V] dy^T [V, rows]
    gemm(be_, CUBLAS_OP_N, CUBLAS_OP_N, c_, rows_, v_, gemm_weights(weight), c_, dy->data, v_,
         dx_->data, c_);
  }

 private:
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  int64_t rows_ = 0, c_ = 0, v_ = 0;  // v_: the padded vocabulary Vp
};

}  // namespace

std::unique_ptr<LinearOp> make_linear_in_out(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, int64_t out_features) {
  return std::make_unique<CudaLinearInOut>(be, name, x, dx, out_features);
}

std::unique_ptr<LinearOp> make_linear_tied(CudaBackend& be, const std::string& name,
                                           CudaTensor* x, CudaTensor* dx, CudaTensor* weight,
                                           CudaTensor* weight_grad) {
  return std::make_unique<CudaLinearTied>(be, name, x, dx, weight, weight_grad);
}

}  // namespace xrun::cuda
