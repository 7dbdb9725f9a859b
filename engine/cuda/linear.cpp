// engine/cuda/linear.cpp: the fc layer on cuBLAS: y[N, O] = x[N, I] w[O, I]^T
// + b, with the row-major products written as column-major GEMMs (see
// ../shared/API_NOTES.md: fwd (T, N, O, N, I), dX (N, N, I, N, O), dW (N, T,
// I, O, N)); the compute type is fp32 (TF32 only for tf32 runs); the bias and
// its gradient are xrun kernels.
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

class CudaLinear final : public LinearOp {
 public:
  CudaLinear(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx, int64_t out)
      : be_(be), x_(x), dx_(dx) {
    n_ = x->dims[0];
    in_ = x->dims[1];
    out_ = out;
    if (x->numel() != n_ * in_) throw std::logic_error(name + ": input is not [N, I]");
    auto [w, wg] = be.declare_parameter(name + ".weight", {out, in_}, Layout::plain, 0, true);
    auto [b, bg] = be.declare_parameter(name + ".bias", {out}, Layout::plain, 0, false);
    weight = w, weight_grad = wg, bias = b, bias_grad = bg;
    y = be.declare_activation(name + ".y", {n_, out}, out, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {n_, out}, out, TensorRole::activation_grad);
    be.need_workspace(size_t{32} << 20);  // cuBLAS on Hopper wants 32 MiB
  }

  void forward() override {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(be_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, i(out_), i(n_), i(in_), &one,
                              weights(), be_.gemm_type(), i(in_), x_->data, be_.gemm_type(),
                              i(in_), &zero, y->data, be_.gemm_type(), i(out_),
                              be_.gemm_compute(), CUBLAS_GEMM_DEFAULT));
    add_bias(y->data, be_.activation_type(), static_cast<const float*>(bias->data), n_, out_,
             be_.stream());
  }

  void backward() override {
    const float one = 1.0f, zero = 0.0f;
    // dW[O, I] = dY^T X
    CUBLAS_CHECK(cublasGemmEx(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, i(in_), i(out_), i(n_), &one,
                              x_->data, be_.gemm_type(), i(in_), dy->data, be_.gemm_type(),
                              i(out_), &zero, weight_gradient(), be_.gemm_type(), i(in_),
                              be_.gemm_compute(), CUBLAS_GEMM_DEFAULT));
    cuda::bias_grad(dy->data, be_.activation_type(), static_cast<float*>(bias_grad->data), n_, out_,
                    nullptr, be_.stream());
    if (!dx_) return;
    // dX[N, I] = dY W
    CUBLAS_CHECK(cublasGemmEx(be_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, i(in_), i(n_), i(out_), &one,
                              weights(), be_.gemm_type(), i(in_), dy->data, be_.gemm_type(),
                              i(out_), &zero, dx_->data, be_.gemm_type(), i(in_),
                              be_.gemm_compute(), CUBLAS_GEMM_DEFAULT));
  }

 private:
  static int i(int64_t v) { return static_cast<int>(v); }
  const void* weights() const {
    const CudaTensor* w = as_cuda(weight);
    return w->has_half ? w->half_weights : w->data;
  }
  void* weight_gradient() const {
    CudaTensor* g = as_cuda(weight_grad);
    return g->has_half ? g->half_grad : g->data;
  }

  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  int64_t n_ = 0, in_ = 0, out_ = 0;
};

}  // namespace

std::unique_ptr<LinearOp> make_linear(CudaBackend& be, const std::string& name, CudaTensor* x,
                                      CudaTensor* dx, int64_t out_features) {
  return std::make_unique<CudaLinear>(be, name, x, dx, out_features);
}

}  // namespace xrun::cuda
