// engine/cuda/pointwise_ops.cpp: the element-wise op family on the device
// (residual gradient sums, copies), over tensors of one shape, layout and
// type; the kernels are in pointwise.cu.
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

class CudaPointwise final : public PointwiseOps {
 public:
  explicit CudaPointwise(CudaBackend& be) : be_(be) {}
  void add_inplace(Tensor* dst, const Tensor* src) override {
    check(dst, src);
    cuda::add_inplace(dst->data, src->data, as_cuda(dst)->storage,
                      as_cuda(dst)->stored_elements(), be_.stream());
  }
  void copy(Tensor* dst, const Tensor* src) override {
    check(dst, src);
    CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data, dst->bytes, cudaMemcpyDeviceToDevice,
                               be_.stream()));
  }

 private:
  static void check(const Tensor* dst, const Tensor* src) {
    const CudaTensor* d = as_cuda(dst);
    const CudaTensor* s = as_cuda(src);
    if (d->dims != s->dims || d->c_pad != s->c_pad || d->storage != s->storage ||
        d->layout != s->layout)
      throw std::logic_error("pointwise: " + dst->name + " and " + src->name +
                             " differ in shape, layout or type");
  }
  CudaBackend& be_;
};

}  // namespace

std::unique_ptr<PointwiseOps> make_pointwise(CudaBackend& be) {
  return std::make_unique<CudaPointwise>(be);
}

}  // namespace xrun::cuda
