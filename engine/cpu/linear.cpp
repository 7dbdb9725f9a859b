// engine/cpu/linear.cpp: the fully connected layer (torchvision's `fc`) as a
// oneDNN inner product: y[N, O] = x w^T + b, with backward-data and
// backward-weights (+ bias). The input is the pooled [N, C, 1, 1] tensor in
// whatever layout pooling produced; the output is plain [N, O] for the loss.
// fc computes in fp32 at every precision, as the loss does: a bf16 input
// (the pooled features of a bf16 run) is read through an fp32 copy and its
// gradient written back through one (N x C values: nothing to speak of).
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;

class CpuLinear final : public LinearOp, public CpuOp {
 public:
  CpuLinear(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx, int64_t out)
      : be_(be), x_(x), dx_(dx) {
    const memory::dims x_dims = dnnl_compat::dims_of(x->md);  // [N, C] or [N, C, 1, 1]
    const int64_t n = x_dims[0], in = x_dims[1];
    memory::dims w_dims = x_dims;
    w_dims[0] = out;
    const memory::desc y_md = plain_md({n, out});
    const memory::desc b_md = plain_md({out});
    memory::desc src_md = x->md;
    if (x->dtype != DType::f32) {
      src_md = plain_md(x_dims);
      x_f32_ = be.declare(name + ".x_f32", x->dims, src_md, TensorRole::activation);
      x_in_.make(be.engine(), x->md, src_md);
      if (dx) {
        dx_f32_ = be.declare(name + ".dx_f32", x->dims, src_md, TensorRole::activation_grad);
        dx_out_.make(be.engine(), src_md, dx->md);
      }
    }

    fwd_pd_ = dnnl_compat::inner_product_forward(be.engine(), be.attr(),
                                                 prop_kind::forward_training, src_md,
                                                 any_md(w_dims), b_md, y_md);
    fwd_ = inner_product_forward(fwd_pd_);
    bww_pd_ = dnnl_compat::inner_product_backward_weights(be.engine(), be.attr(), src_md,
                                                          any_md(w_dims), b_md, y_md, fwd_pd_);
    bww_ = inner_product_backward_weights(bww_pd_);
    be.need_scratchpad(fwd_pd_.scratchpad_desc());
    be.need_scratchpad(bww_pd_.scratchpad_desc());

    auto [w, wg] = be.declare_parameter(name + ".weight", {out, in}, fwd_pd_.weights_desc());
    auto [b, bg] = be.declare_parameter(name + ".bias", {out}, b_md);
    weight = w, weight_grad = wg, bias = b, bias_grad = bg;
    y = be.declare(name + ".y", {n, out}, y_md, TensorRole::activation);
    dy = be.declare(name + ".dy", {n, out}, y_md, TensorRole::activation_grad);
    dw_reorder_.make(be.engine(), bww_pd_.diff_weights_desc(), fwd_pd_.weights_desc());
    if (dw_reorder_.needed)
      dw_tmp_ = be.declare(name + ".dw_tmp", {out, in}, bww_pd_.diff_weights_desc(),
                           TensorRole::workspace);

    if (dx) {
      bwd_pd_ = dnnl_compat::inner_product_backward_data(be.engine(), be.attr(), src_md,
                                                         any_md(w_dims), y_md, fwd_pd_);
      bwd_ = inner_product_backward_data(bwd_pd_);
      be.need_scratchpad(bwd_pd_.scratchpad_desc());
      if (!(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
      w_reorder_.make(be.engine(), fwd_pd_.weights_desc(), bwd_pd_.weights_desc());
      if (w_reorder_.needed)
        w_tmp_ = be.declare(name + ".w_bwd", {out, in}, bwd_pd_.weights_desc(),
                            TensorRole::workspace);
      be.note_kernel("fc bwd_data", bwd_pd_.impl_info_str());
    }
    be.note_kernel("fc fwd", fwd_pd_.impl_info_str());
    be.note_kernel("fc bwd_weights", bww_pd_.impl_info_str());
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    auto m = [](Tensor* t) { return as_cpu(t)->mem; };
    const memory& src = x_f32_ ? x_f32_->mem : x_->mem;
    if (x_f32_) x_in_.bind(x_->mem, src);
    fwd_args_ = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, m(weight)},
                 {DNNL_ARG_BIAS, m(bias)}, {DNNL_ARG_DST, m(y)}, {DNNL_ARG_SCRATCHPAD, sp}};
    const memory& dw = dw_reorder_.needed ? dw_tmp_->mem : m(weight_grad);
    dw_reorder_.bind(dw, m(weight_grad));
    bww_args_ = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, m(dy)},
                 {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, m(bias_grad)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    if (dx_) {
      const memory& w = w_reorder_.needed ? w_tmp_->mem : m(weight);
      w_reorder_.bind(m(weight), w);
      const memory& dsrc = dx_f32_ ? dx_f32_->mem : dx_->mem;
      if (dx_f32_) dx_out_.bind(dsrc, dx_->mem);
      bwd_args_ = {{DNNL_ARG_DIFF_DST, m(dy)}, {DNNL_ARG_WEIGHTS, w},
                   {DNNL_ARG_DIFF_SRC, dsrc}, {DNNL_ARG_SCRATCHPAD, sp}};
    }
  }

  void forward() override {
    if (x_f32_) x_in_.run(be_.stream());
    fwd_.execute(be_.stream(), fwd_args_);
  }
  void backward() override {
    bww_.execute(be_.stream(), bww_args_);
    dw_reorder_.run(be_.stream());
    if (dx_) {
      w_reorder_.run(be_.stream());
      bwd_.execute(be_.stream(), bwd_args_);
      if (dx_f32_) dx_out_.run(be_.stream());
    }
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  inner_product_forward::primitive_desc fwd_pd_;
  inner_product_backward_weights::primitive_desc bww_pd_;
  inner_product_backward_data::primitive_desc bwd_pd_;
  inner_product_forward fwd_;
  inner_product_backward_weights bww_;
  inner_product_backward_data bwd_;
  Reorder dw_reorder_, w_reorder_;
  Reorder x_in_, dx_out_;  // a bf16 input and its gradient <-> their fp32 copies
  CpuTensor* x_f32_ = nullptr;
  CpuTensor* dx_f32_ = nullptr;
  CpuTensor* dw_tmp_ = nullptr;
  CpuTensor* w_tmp_ = nullptr;
  Args fwd_args_, bww_args_, bwd_args_;
};

}  // namespace

std::unique_ptr<LinearOp> make_linear(CpuBackend& be, const std::string& name, CpuTensor* x,
                                      CpuTensor* dx, int64_t out_features) {
  return std::make_unique<CpuLinear>(be, name, x, dx, out_features);
}

}  // namespace xrun::cpu
