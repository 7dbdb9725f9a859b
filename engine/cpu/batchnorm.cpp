// engine/cpu/batchnorm.cpp: batch norm on oneDNN with ReLU fused
// (fuse_norm_relu, its mask kept in a workspace) or followed by the residual
// add + ReLU (a binary add, then a ReLU, both in place). oneDNN keeps no
// running statistics: they are updated here PyTorch's way (momentum 0.1,
// unbiased variance), from the batch statistics the forward pass returns.
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;
constexpr float kEps = static_cast<float>(kBatchNormEps);
constexpr float kMomentum = static_cast<float>(kBatchNormMomentum);

class CpuBatchNorm final : public BatchNormOp, public CpuOp {
 public:
  CpuBatchNorm(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx,
               BnActivation act, CpuTensor* residual, CpuTensor* d_residual)
      : be_(be), x_(x), dx_(dx), act_(act), residual_(residual), d_residual_(d_residual) {
    const int64_t c = x->dims[1];
    count_ = x->numel() / c;
    const memory::desc vec = plain_md({c});
    auto flags = normalization_flags::use_scale | normalization_flags::use_shift;
    if (act == BnActivation::relu) flags |= normalization_flags::fuse_norm_relu;

    auto fwd_desc = batch_normalization_forward::desc(prop_kind::forward_training, x->md, kEps,
                                                      flags);
    fwd_pd_ = batch_normalization_forward::primitive_desc(fwd_desc, be.attr(), be.engine());
    fwd_ = batch_normalization_forward(fwd_pd_);
    auto inf_desc = batch_normalization_forward::desc(
        prop_kind::forward_inference, x->md, kEps, flags | normalization_flags::use_global_stats);
    inf_pd_ = batch_normalization_forward::primitive_desc(inf_desc, be.attr(), be.engine());
    inf_ = batch_normalization_forward(inf_pd_);
    auto bwd_desc = batch_normalization_backward::desc(prop_kind::backward, fwd_pd_.dst_desc(),
                                                       x->md, kEps, flags);
    bwd_pd_ = batch_normalization_backward::primitive_desc(bwd_desc, be.attr(), be.engine(),
                                                           fwd_pd_);
    bwd_ = batch_normalization_backward(bwd_pd_);
    for (const auto& pd_sp : {fwd_pd_.scratchpad_desc(), inf_pd_.scratchpad_desc(),
                              bwd_pd_.scratchpad_desc()})
      be.need_scratchpad(pd_sp);
    if (!(fwd_pd_.dst_desc() == x->md) || !(bwd_pd_.diff_src_desc() == x->md))
      throw std::logic_error(name + ": batch norm changes the layout");
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");

    y = be.declare(name + ".y", x->dims, x->md, TensorRole::activation);
    dy = be.declare(name + ".dy", x->dims, x->md, TensorRole::activation_grad);
    auto [g, gg] = be.declare_parameter(name + ".weight", {c}, vec);
    auto [b, bg] = be.declare_parameter(name + ".bias", {c}, vec);
    gamma = g, gamma_grad = gg, beta = b, beta_grad = bg;
    running_mean = be.declare(name + ".running_mean", {c}, vec, TensorRole::state);
    running_var = be.declare(name + ".running_var", {c}, vec, TensorRole::state);
    mean_ = be.declare(name + ".batch_mean", {c}, fwd_pd_.mean_desc(), TensorRole::workspace);
    var_ = be.declare(name + ".batch_var", {c}, fwd_pd_.variance_desc(), TensorRole::workspace);
    if (act == BnActivation::relu) {
      const memory::desc ws = fwd_pd_.workspace_desc();
      relu_mask_ = be.declare(name + ".relu_mask", {static_cast<int64_t>(ws.get_size())}, ws,
                              TensorRole::workspace, DType::u8);
    }

    if (act == BnActivation::add_relu) {
      if (!residual || !d_residual || !(residual->md == x->md) || !(d_residual->md == x->md))
        throw std::logic_error(name + ": residual missing or of another layout");
      // The add and the ReLU are two primitives: oneDNN 2.6's binary with a
      // ReLU post-op gives wrong results (and writes out of place) on blocked
      // layouts whose channel count is not a multiple of 16.
      auto add_desc = binary::desc(algorithm::binary_add, x->md, x->md, x->md);
      auto add_pd = binary::primitive_desc(add_desc, be.attr(), be.engine());
      add_ = binary(add_pd);
      be.need_scratchpad(add_pd.scratchpad_desc());
      auto relu_fwd = eltwise_forward::primitive_desc(
          eltwise_forward::desc(prop_kind::forward_training,
                                algorithm::eltwise_relu_use_dst_for_bwd, x->md, 0.0f, 0.0f),
          be.attr(), be.engine());
      relu_fwd_ = eltwise_forward(relu_fwd);
      be.need_scratchpad(relu_fwd.scratchpad_desc());
      auto relu_bwd_pd = eltwise_backward::primitive_desc(
          eltwise_backward::desc(algorithm::eltwise_relu_use_dst_for_bwd, x->md, x->md, 0.0f,
                                 0.0f),
          be.attr(), be.engine(), relu_fwd);
      relu_bwd_ = eltwise_backward(relu_bwd_pd);
      be.need_scratchpad(relu_bwd_pd.scratchpad_desc());
    }
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    auto m = [](Tensor* t) { return as_cpu(t)->mem; };
    fwd_args_ = {{DNNL_ARG_SRC, x_->mem},        {DNNL_ARG_DST, m(y)},
                 {DNNL_ARG_MEAN, mean_->mem},    {DNNL_ARG_VARIANCE, var_->mem},
                 {DNNL_ARG_SCALE, m(gamma)},     {DNNL_ARG_SHIFT, m(beta)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    if (relu_mask_) fwd_args_[DNNL_ARG_WORKSPACE] = relu_mask_->mem;
    inf_args_ = {{DNNL_ARG_SRC, x_->mem},           {DNNL_ARG_DST, m(y)},
                 {DNNL_ARG_MEAN, m(running_mean)},  {DNNL_ARG_VARIANCE, m(running_var)},
                 {DNNL_ARG_SCALE, m(gamma)},        {DNNL_ARG_SHIFT, m(beta)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    // With add_relu the gradient reaching BN is relu'(y) * dy, which is also
    // the residual's gradient: computed once into d_residual.
    const memory& bn_diff_dst = act_ == BnActivation::add_relu ? d_residual_->mem : m(dy);
    bwd_args_ = {{DNNL_ARG_SRC, x_->mem},          {DNNL_ARG_MEAN, mean_->mem},
                 {DNNL_ARG_VARIANCE, var_->mem},   {DNNL_ARG_SCALE, m(gamma)},
                 {DNNL_ARG_SHIFT, m(beta)},        {DNNL_ARG_DIFF_DST, bn_diff_dst},
                 {DNNL_ARG_DIFF_SCALE, m(gamma_grad)}, {DNNL_ARG_DIFF_SHIFT, m(beta_grad)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    if (dx_) bwd_args_[DNNL_ARG_DIFF_SRC] = dx_->mem;
    if (relu_mask_) bwd_args_[DNNL_ARG_WORKSPACE] = relu_mask_->mem;
    if (act_ == BnActivation::add_relu) {
      add_args_ = {{DNNL_ARG_SRC_0, m(y)},
                   {DNNL_ARG_SRC_1, residual_->mem},
                   {DNNL_ARG_DST, m(y)},
                   {DNNL_ARG_SCRATCHPAD, sp}};
      relu_fwd_args_ = {{DNNL_ARG_SRC, m(y)}, {DNNL_ARG_DST, m(y)}, {DNNL_ARG_SCRATCHPAD, sp}};
      relu_bwd_args_ = {{DNNL_ARG_DST, m(y)},
                        {DNNL_ARG_DIFF_DST, m(dy)},
                        {DNNL_ARG_DIFF_SRC, d_residual_->mem},
                        {DNNL_ARG_SCRATCHPAD, sp}};
    }
  }

  void forward_train() override {
    fwd_.execute(be_.stream(), fwd_args_);
    if (act_ == BnActivation::add_relu) add_relu();
    update_running_stats();
  }

  void forward_infer() override {
    inf_.execute(be_.stream(), inf_args_);
    if (act_ == BnActivation::add_relu) add_relu();
  }

  void backward() override {
    if (!dx_) throw std::logic_error("batch norm backward without dx");
    if (act_ == BnActivation::add_relu) relu_bwd_.execute(be_.stream(), relu_bwd_args_);
    bwd_.execute(be_.stream(), bwd_args_);
  }

 private:
  void add_relu() {  // y = relu(y + residual), in place
    add_.execute(be_.stream(), add_args_);
    relu_fwd_.execute(be_.stream(), relu_fwd_args_);
  }

  void update_running_stats() {
    const float* mean = static_cast<const float*>(mean_->data);
    const float* var = static_cast<const float*>(var_->data);
    float* rm = static_cast<float*>(running_mean->data);
    float* rv = static_cast<float*>(running_var->data);
    const float unbias = count_ > 1 ? static_cast<float>(count_) / (count_ - 1) : 1.0f;
    for (int64_t i = 0; i < running_mean->numel(); ++i) {
      rm[i] = (1 - kMomentum) * rm[i] + kMomentum * mean[i];
      rv[i] = (1 - kMomentum) * rv[i] + kMomentum * var[i] * unbias;
    }
  }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  BnActivation act_;
  CpuTensor* residual_;
  CpuTensor* d_residual_;
  int64_t count_ = 1;  // values per channel: N*H*W
  CpuTensor* mean_ = nullptr;
  CpuTensor* var_ = nullptr;
  CpuTensor* relu_mask_ = nullptr;
  batch_normalization_forward::primitive_desc fwd_pd_, inf_pd_;
  batch_normalization_backward::primitive_desc bwd_pd_;
  batch_normalization_forward fwd_, inf_;
  batch_normalization_backward bwd_;
  binary add_;
  eltwise_forward relu_fwd_;
  eltwise_backward relu_bwd_;
  Args fwd_args_, inf_args_, bwd_args_, add_args_, relu_fwd_args_, relu_bwd_args_;
};

}  // namespace

std::unique_ptr<BatchNormOp> make_batch_norm(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, BnActivation act,
                                             CpuTensor* residual, CpuTensor* d_residual) {
  return std::make_unique<CpuBatchNorm>(be, name, x, dx, act, residual, d_residual);
}

}  // namespace xrun::cpu
