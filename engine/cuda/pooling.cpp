// engine/cuda/pooling.cpp: max pooling on cuDNN (NHWC, the deterministic
// max mode so backward is reproducible) and global average pooling to
// [N, C] with xrun's kernels (a mean over H*W per channel).
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

class CudaMaxPool final : public PoolOp {
 public:
  CudaMaxPool(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx,
              int64_t kernel, int64_t stride, int64_t pad)
      : be_(be), x_(x), dx_(dx) {
    const int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
    const int64_t oh = (h + 2 * pad - kernel) / stride + 1, ow = (w + 2 * pad - kernel) / stride + 1;
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX_DETERMINISTIC,
                                            CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(kernel),
                                            static_cast<int>(kernel), static_cast<int>(pad),
                                            static_cast<int>(pad), static_cast<int>(stride),
                                            static_cast<int>(stride)));
    y = be.declare_activation(name + ".y", {n, c, oh, ow}, x->c_pad, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {n, c, oh, ow}, x->c_pad, TensorRole::activation_grad);
  }
  ~CudaMaxPool() override {
    if (pool_) cudnnDestroyPoolingDescriptor(pool_);
  }

  void forward_train() override { forward_infer(); }
  void forward_infer() override {
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingForward(be_.cudnn(), pool_, &one, x_->desc, x_->data, &zero,
                                    as_cuda(y)->desc, y->data));
  }
  void backward() override {
    if (!dx_) return;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnPoolingBackward(be_.cudnn(), pool_, &one, as_cuda(y)->desc, y->data,
                                     as_cuda(dy)->desc, dy->data, x_->desc, x_->data, &zero,
                                     dx_->desc, dx_->data));
  }

 private:
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
  cudnnPoolingDescriptor_t pool_ = nullptr;
};

class CudaGlobalAvgPool final : public PoolOp {
 public:
  CudaGlobalAvgPool(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx)
      : be_(be), x_(x), dx_(dx) {
    const int64_t n = x->dims[0], c = x->dims[1];
    if (x->c_pad != c) throw std::logic_error(name + ": pooling over padded channels");
    y = be.declare_activation(name + ".y", {n, c}, c, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {n, c}, c, TensorRole::activation_grad);
  }
  void forward_train() override { forward_infer(); }
  void forward_infer() override {
    global_avg_pool(x_->data, y->data, be_.activation_type(), x_->dims[0],
                    x_->dims[2] * x_->dims[3], x_->dims[1], be_.stream());
  }
  void backward() override {
    if (!dx_) return;
    global_avg_pool_backward(dy->data, dx_->data, be_.activation_type(), x_->dims[0],
                             x_->dims[2] * x_->dims[3], x_->dims[1], be_.stream());
  }

 private:
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
};

}  // namespace

std::unique_ptr<PoolOp> make_max_pool(CudaBackend& be, const std::string& name, CudaTensor* x,
                                      CudaTensor* dx, int64_t kernel, int64_t stride,
                                      int64_t pad) {
  return std::make_unique<CudaMaxPool>(be, name, x, dx, kernel, stride, pad);
}

std::unique_ptr<PoolOp> make_global_avg_pool(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx) {
  return std::make_unique<CudaGlobalAvgPool>(be, name, x, dx);
}

}  // namespace xrun::cuda
