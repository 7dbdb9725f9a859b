// engine/cuda/layer_norm.cpp: GPT-2's layer norm op on the device around
// layer_norm.cu's kernels: statistics per row kept from the forward pass
// (fp32 mean and rstd, [rows] each) for the backward pass; weight and bias
// fp32.
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

constexpr float kEps = 1e-5f;  // torch.nn.LayerNorm's default, as transformers' GPT-2

class CudaLayerNorm final : public LayerNormOp {
 public:
  CudaLayerNorm(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx,
                bool add_to_dx)
      : be_(be), x_(x), dx_(dx), add_to_dx_(add_to_dx) {
    if (x->dims.size() != 2 || x->layout != Layout::nhwc || x->c_pad != x->dims[1])
      throw std::logic_error(name + ": expects a plain [rows, C] activation");
    rows_ = x->dims[0], c_ = x->dims[1];
    auto [g, gg] = be.declare_parameter(name + ".weight", {c_}, Layout::plain, 0, false);
    auto [b, bg] = be.declare_parameter(name + ".bias", {c_}, Layout::plain, 0, false);
    gamma = g, gamma_grad = gg, beta = b, beta_grad = bg;
    y = be.declare_activation(name + ".y", x->dims, c_, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", x->dims, c_, TensorRole::activation_grad);
    const size_t stat_bytes = static_cast<size_t>(rows_) * sizeof(float);
    mean_ = be.declare_buffer(name + ".mean", {rows_}, stat_bytes, TensorRole::activation);
    rstd_ = be.declare_buffer(name + ".rstd", {rows_}, stat_bytes, TensorRole::activation);
    be.need_scratch(static_cast<size_t>(2 * column_chunks(rows_) * c_) * sizeof(float));
  }

  void forward() override {
    layer_norm_forward(x_->data, be_.activation_type(), f(gamma), f(beta), rows_, c_, kEps,
                       y->data, f(mean_), f(rstd_), be_.stream());
  }
  void backward() override {
    if (!dx_) throw std::logic_error("layer norm: backward without dx");
    layer_norm_backward(dy->data, x_->data, be_.activation_type(), f(gamma), f(mean_), f(rstd_),
                        rows_, c_, dx_->data, add_to_dx_, f(gamma_grad), f(beta_grad),
                        static_cast<float*>(be_.scratch()), be_.stream());
  }

 private:
  static float* f(Tensor* t) { return static_cast<float*>(t->data); }
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  bool add_to_dx_;
  int64_t rows_ = 0, c_ = 0;
  CudaTensor* mean_ = nullptr;
  CudaTensor* rstd_ = nullptr;
};

}  // namespace

std::unique_ptr<LayerNormOp> make_layer_norm(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, bool add_to_dx) {
  return std::make_unique<CudaLayerNorm>(be, name, x, dx, add_to_dx);
}

}  // namespace xrun::cuda
