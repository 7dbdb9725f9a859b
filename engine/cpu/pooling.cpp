// engine/cpu/pooling.cpp: max pooling (3x3/2 pad 1 in the stem; its
// workspace of argmax positions kept for backward) and global average
// pooling to [N, C], both on oneDNN pooling primitives, in the input's type
// (f32 or bf16).
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;

class CpuPool final : public PoolOp, public CpuOp {
 public:
  // kernel == 0: global average pooling over the whole H x W.
  CpuPool(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx, int64_t kernel,
          int64_t stride, int64_t pad)
      : be_(be), x_(x), dx_(dx) {
    const int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
    const bool global = kernel == 0;
    const algorithm alg = global ? algorithm::pooling_avg_exclude_padding : algorithm::pooling_max;
    const memory::dims k = global ? memory::dims{h, w} : memory::dims{kernel, kernel};
    const memory::dims st = global ? memory::dims{1, 1} : memory::dims{stride, stride};
    const memory::dims p = global ? memory::dims{0, 0} : memory::dims{pad, pad};
    const int64_t oh = global ? 1 : (h + 2 * pad - kernel) / stride + 1;
    const int64_t ow = global ? 1 : (w + 2 * pad - kernel) / stride + 1;
    const memory::dims y_dims = {n, c, oh, ow};

    fwd_pd_ = dnnl_compat::pooling_forward(be.engine(), be.attr(), prop_kind::forward_training,
                                           alg, x->md,
                                           any_md(y_dims, dnnl_compat::data_type_of(x->md)), st,
                                           k, p);
    fwd_ = pooling_forward(fwd_pd_);
    inf_pd_ = dnnl_compat::pooling_forward(be.engine(), be.attr(), prop_kind::forward_inference,
                                           alg, x->md, fwd_pd_.dst_desc(), st, k, p);
    inf_ = pooling_forward(inf_pd_);
    bwd_pd_ = dnnl_compat::pooling_backward(be.engine(), be.attr(), alg, x->md,
                                            fwd_pd_.dst_desc(), st, k, p, fwd_pd_);
    bwd_ = pooling_backward(bwd_pd_);
    be.note_kernel("pool fwd", fwd_pd_.impl_info_str());
    be.note_kernel("pool bwd", bwd_pd_.impl_info_str());
    for (const auto& sp : {fwd_pd_.scratchpad_desc(), inf_pd_.scratchpad_desc(),
                           bwd_pd_.scratchpad_desc()})
      be.need_scratchpad(sp);
    if (!(bwd_pd_.diff_src_desc() == x->md)) throw std::logic_error(name + ": layout mismatch");
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");

    // Global pooling's output is [N, C] canonically (torchvision flattens it).
    std::vector<int64_t> canonical = global ? std::vector<int64_t>{n, c}
                                            : std::vector<int64_t>{n, c, oh, ow};
    y = be.declare(name + ".y", canonical, fwd_pd_.dst_desc(), TensorRole::activation);
    dy = be.declare(name + ".dy", canonical, fwd_pd_.dst_desc(), TensorRole::activation_grad);
    if (!global) {
      const memory::desc ws = fwd_pd_.workspace_desc();
      workspace_ = be.declare(name + ".argmax", {static_cast<int64_t>(ws.get_size())}, ws,
                              TensorRole::workspace, DType::u8);
    }
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    fwd_args_ = {{DNNL_ARG_SRC, x_->mem}, {DNNL_ARG_DST, as_cpu(y)->mem},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    inf_args_ = fwd_args_;
    bwd_args_ = {{DNNL_ARG_DIFF_DST, as_cpu(dy)->mem}, {DNNL_ARG_SCRATCHPAD, sp}};
    if (dx_) bwd_args_[DNNL_ARG_DIFF_SRC] = dx_->mem;
    if (workspace_) {
      fwd_args_[DNNL_ARG_WORKSPACE] = workspace_->mem;
      bwd_args_[DNNL_ARG_WORKSPACE] = workspace_->mem;
    }
  }

  void forward_train() override { fwd_.execute(be_.stream(), fwd_args_); }
  void forward_infer() override { inf_.execute(be_.stream(), inf_args_); }
  void backward() override {
    if (dx_) bwd_.execute(be_.stream(), bwd_args_);
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  CpuTensor* workspace_ = nullptr;
  pooling_forward::primitive_desc fwd_pd_, inf_pd_;
  pooling_backward::primitive_desc bwd_pd_;
  pooling_forward fwd_, inf_;
  pooling_backward bwd_;
  Args fwd_args_, inf_args_, bwd_args_;
};

}  // namespace

std::unique_ptr<PoolOp> make_max_pool(CpuBackend& be, const std::string& name, CpuTensor* x,
                                      CpuTensor* dx, int64_t kernel, int64_t stride,
                                      int64_t pad) {
  if (kernel < 1) throw std::invalid_argument(name + ": pooling kernel must be >= 1");
  return std::make_unique<CpuPool>(be, name, x, dx, kernel, stride, pad);
}

std::unique_ptr<PoolOp> make_global_avg_pool(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx) {
  return std::make_unique<CpuPool>(be, name, x, dx, 0, 1, 0);
}

}  // namespace xrun::cpu
