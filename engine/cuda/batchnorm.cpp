// engine/cuda/batchnorm.cpp: batch norm on cuDNN's *Ex calls (NHWC,
// CUDNN_BATCHNORM_SPATIAL_PERSISTENT) with ReLU fused (OPS_BN_ACTIVATION)
// or the residual add + ReLU fused (OPS_BN_ADD_ACTIVATION, whose backward
// writes the residual's gradient too); the per-layer reserve space carries
// what backward needs from forward. The fused form is used only where cuDNN
// runs it: its sizes are queried when the layer is built and, once the plan
// is bound, one trial forward (checked against the host's arithmetic: a
// success status alone could hide a dropped ReLU) and backward on the
// layer's own buffers must succeed (cuDNN documents the semi-persistent NHWC kernels for half
// data; what it accepts for fp32 differs by version and card). Otherwise
// the layer runs plain batch norm plus xrun's ReLU / add+ReLU kernels. It
// never runs with a null workspace. Scale, bias and statistics are fp32
// whatever the activation type; running statistics are cuDNN's (momentum
// 0.1, unbiased running variance, as PyTorch).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

constexpr double kEps = kBatchNormEps;
constexpr double kMomentum = kBatchNormMomentum;

class CudaBatchNorm final : public BatchNormOp, public CudaOp {
 public:
  CudaBatchNorm(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx,
                BnActivation act, CudaTensor* residual, CudaTensor* d_residual)
      : be_(be), x_(x), dx_(dx), act_(act), residual_(residual), d_residual_(d_residual) {
    const int64_t c = x->dims[1];
    if (x->c_pad != c) throw std::logic_error(name + ": batch norm over padded channels");
    if (act == BnActivation::add_relu && (!residual || !d_residual))
      throw std::logic_error(name + ": add_relu needs the residual and its gradient");
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&param_desc_));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param_desc_, x->desc, kMode));
    CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu_));
    CUDNN_CHECK(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));

    y = be.declare_activation(name + ".y", x->dims, c, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", x->dims, c, TensorRole::activation_grad);
    auto [g, gg] = be.declare_parameter(name + ".weight", {c}, Layout::plain, 0, false);
    auto [b, bg] = be.declare_parameter(name + ".bias", {c}, Layout::plain, 0, false);
    gamma = g, gamma_grad = gg, beta = b, beta_grad = bg;
    running_mean = be.declare_buffer(name + ".running_mean", {c}, c * 4, TensorRole::state);
    running_var = be.declare_buffer(name + ".running_var", {c}, c * 4, TensorRole::state);
    saved_mean_ = be.declare_buffer(name + ".saved_mean", {c}, c * 4, TensorRole::workspace);
    saved_inv_var_ = be.declare_buffer(name + ".saved_inv_var", {c}, c * 4, TensorRole::workspace);

    ops_ = act == BnActivation::none   ? CUDNN_BATCHNORM_OPS_BN
           : act == BnActivation::relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                                       : CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
    const cudnnTensorDescriptor_t z = act == BnActivation::add_relu ? residual->desc : nullptr;
    const cudnnActivationDescriptor_t a = act == BnActivation::none ? nullptr : relu_;
    size_t fwd_ws = 0, bwd_ws = 0, reserve = 0;
    fused_ =
        cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            be.cudnn(), kMode, ops_, x->desc, z, as_cuda(y)->desc, param_desc_, a, &fwd_ws) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            be.cudnn(), kMode, ops_, x->desc, as_cuda(y)->desc, as_cuda(dy)->desc, z,
            dx ? dx->desc : x->desc, param_desc_, a, &bwd_ws) == CUDNN_STATUS_SUCCESS &&
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(be.cudnn(), kMode, ops_, a, x->desc,
                                                             &reserve) == CUDNN_STATUS_SUCCESS;
    if (fused_) {
      // At least some bytes, so the fused calls never see a null workspace.
      be.need_workspace(std::max({fwd_ws, bwd_ws, kMinWorkspace}));
      if (reserve > 0)
        reserve_ = be.declare_buffer(name + ".reserve", {static_cast<int64_t>(reserve)}, reserve,
                                     TensorRole::workspace);
    }
    be.register_op(this);
  }


  ~CudaBatchNorm() override {
    if (param_desc_) cudnnDestroyTensorDescriptor(param_desc_);
    if (relu_) cudnnDestroyActivationDescriptor(relu_);
  }

  // The trial: one fused forward on a known input, checked against the
  // host's arithmetic, and one fused backward on the bound buffers. A
  // success status alone is not enough: a cuDNN build that accepts the ops
  // but runs plain batch norm would silently drop the ReLU (or the residual
  // add). Any status but success, a wrong value, or no workspace, and the
  // layer stays unfused for the whole run. x, y, dy and the residual are
  // overwritten by every real step before being read; gamma and beta are
  // restored.
  void bind() override {
    if (!fused_) return;
    if (!be_.workspace()) {
      fused_ = false;
      return;
    }
    fused_ = fused_forward_is_right();
    if (fused_ && dx_) fused_ = run_fused_backward() == CUDNN_STATUS_SUCCESS;
  }

  void forward_train() override {
    const float one = 1.0f, zero = 0.0f;
    if (fused_) {
      CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
          be_.cudnn(), kMode, ops_, &one, &zero, x_->desc, x_->data, z_desc(), z_data(),
          as_cuda(y)->desc, y->data, param_desc_, gamma->data, beta->data, kMomentum,
          running_mean->data, running_var->data, kEps, saved_mean_->data, saved_inv_var_->data,
          activation(), be_.workspace(), be_.workspace_bytes(), reserve_data(), reserve_bytes()));
      return;
    }
    CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        be_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_->desc, x_->data, as_cuda(y)->desc,
        y->data, param_desc_, gamma->data, beta->data, kMomentum, running_mean->data,
        running_var->data, kEps, saved_mean_->data, saved_inv_var_->data));
    apply_activation();
  }

  void forward_infer() override {
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        be_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_->desc, x_->data, as_cuda(y)->desc,
        y->data, param_desc_, gamma->data, beta->data, running_mean->data, running_var->data,
        kEps));
    apply_activation();
  }

  void backward() override {
    if (!dx_) throw std::logic_error("batch norm backward without dx");
    const float one = 1.0f, zero = 0.0f;
    if (fused_) {
      CUDNN_CHECK(run_fused_backward());
      return;
    }
    // Unfused: the gradient before the ReLU (which, with add_relu, is also the
    // residual's gradient; with relu alone it replaces dy in place: nothing
    // reads dy after this layer's backward), then plain batch norm backward.
    CudaTensor* g = as_cuda(dy);
    if (act_ != BnActivation::none) {
      g = act_ == BnActivation::add_relu ? d_residual_ : as_cuda(dy);
      relu_backward(y->data, dy->data, g->data, be_.activation_type(),
                    as_cuda(y)->stored_elements(), be_.stream());
    }
    CUDNN_CHECK(cudnnBatchNormalizationBackward(
        be_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_->desc, x_->data,
        g->desc, g->data, dx_->desc, dx_->data, param_desc_, gamma->data, gamma_grad->data,
        beta_grad->data, kEps, saved_mean_->data, saved_inv_var_->data));
  }

 private:
  static constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  static constexpr size_t kMinWorkspace = 256;

  cudnnStatus_t run_fused_backward() {
    const float one = 1.0f, zero = 0.0f;
    return cudnnBatchNormalizationBackwardEx(
        be_.cudnn(), kMode, ops_, &one, &zero, &one, &zero, x_->desc, x_->data,
        as_cuda(y)->desc, y->data, as_cuda(dy)->desc, dy->data,
        act_ == BnActivation::add_relu ? d_residual_->desc : nullptr,
        act_ == BnActivation::add_relu ? d_residual_->data : nullptr, dx_->desc, dx_->data,
        param_desc_, gamma->data, beta->data, gamma_grad->data, beta_grad->data, kEps,
        saved_mean_->data, saved_inv_var_->data, activation(), be_.workspace(),
        be_.workspace_bytes(), reserve_data(), reserve_bytes());
  }

  // One fused forward on x = +1, -1, +1, ... along each channel (exact in
  // every precision), gamma 1, beta 0 and a residual of -0.5, against the
  // same arithmetic in double on the host: a missing ReLU is off by about
  // 1, a missing add by 0.5, far beyond half precision's rounding.
  bool fused_forward_is_right() {
    const std::vector<int64_t>& d = x_->dims;
    const int64_t n = d[0], c = d[1], hw = x_->numel() / (n * c);
    const int64_t count = n * hw;
    std::vector<float> saved_gamma(static_cast<size_t>(c)), saved_beta(saved_gamma.size());
    be_.read(gamma, saved_gamma);
    be_.read(beta, saved_beta);
    be_.write(gamma, std::vector<float>(static_cast<size_t>(c), 1.0f));
    be_.write(beta, std::vector<float>(static_cast<size_t>(c), 0.0f));
    auto sign_at = [&](int64_t b, int64_t p) { return (b * hw + p) % 2 == 0 ? 1.0 : -1.0; };
    std::vector<float> x(static_cast<size_t>(x_->numel()));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p)
          x[static_cast<size_t>((b * c + ch) * hw + p)] = static_cast<float>(sign_at(b, p));
    be_.write(x_, x);
    constexpr float kResidual = -0.5f;
    if (act_ == BnActivation::add_relu)
      be_.write(residual_, std::vector<float>(static_cast<size_t>(residual_->numel()), kResidual));
    const float one = 1.0f, zero = 0.0f;
    const bool ran =
        cudnnBatchNormalizationForwardTrainingEx(
            be_.cudnn(), kMode, ops_, &one, &zero, x_->desc, x_->data, z_desc(), z_data(),
            as_cuda(y)->desc, y->data, param_desc_, gamma->data, beta->data, 0.0, nullptr,
            nullptr, kEps, saved_mean_->data, saved_inv_var_->data, activation(),
            be_.workspace(), be_.workspace_bytes(), reserve_data(),
            reserve_bytes()) == CUDNN_STATUS_SUCCESS;
    bool right = ran;
    if (ran) {
      std::vector<float> got(x.size());
      be_.read(y, got);  // waits for the stream
      // Every channel holds the same values: one mean and variance (biased,
      // as batch norm normalises) serve all.
      double sum = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t p = 0; p < hw; ++p) sum += sign_at(b, p);
      const double mean = sum / static_cast<double>(count);
      const double inv_std = 1.0 / std::sqrt(1.0 - mean * mean + kEps);
      for (int64_t b = 0; b < n && right; ++b)
        for (int64_t ch = 0; ch < c && right; ++ch)
          for (int64_t p = 0; p < hw && right; ++p) {
            double want = (sign_at(b, p) - mean) * inv_std;
            if (act_ == BnActivation::add_relu) want += kResidual;
            if (act_ != BnActivation::none) want = std::max(want, 0.0);
            const double v = got[static_cast<size_t>((b * c + ch) * hw + p)];
            right = std::fabs(v - want) <= 0.02 + 0.01 * std::fabs(want);
          }
    }
    be_.write(gamma, saved_gamma);
    be_.write(beta, saved_beta);
    return right;
  }

  cudnnTensorDescriptor_t z_desc() const {
    return act_ == BnActivation::add_relu ? residual_->desc : nullptr;
  }
  const void* z_data() const { return act_ == BnActivation::add_relu ? residual_->data : nullptr; }
  cudnnActivationDescriptor_t activation() const {
    return act_ == BnActivation::none ? nullptr : relu_;
  }
  void* reserve_data() const { return reserve_ ? reserve_->data : nullptr; }
  size_t reserve_bytes() const { return reserve_ ? reserve_->bytes : 0; }

  void apply_activation() {
    const int64_t n = as_cuda(y)->stored_elements();
    if (act_ == BnActivation::relu)
      relu_inplace(y->data, be_.activation_type(), n, be_.stream());
    else if (act_ == BnActivation::add_relu)
      add_relu_inplace(y->data, residual_->data, be_.activation_type(), n, be_.stream());
  }

  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  BnActivation act_;
  CudaTensor* residual_;
  CudaTensor* d_residual_;
  cudnnTensorDescriptor_t param_desc_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnBatchNormOps_t ops_ = CUDNN_BATCHNORM_OPS_BN;
  bool fused_ = false;
  CudaTensor* saved_mean_ = nullptr;
  CudaTensor* saved_inv_var_ = nullptr;
  CudaTensor* reserve_ = nullptr;
};

}  // namespace

std::unique_ptr<BatchNormOp> make_batch_norm(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, BnActivation act,
                                             CudaTensor* residual, CudaTensor* d_residual) {
  return std::make_unique<CudaBatchNorm>(be, name, x, dx, act, residual, d_residual);
}

}  // namespace xrun::cuda
