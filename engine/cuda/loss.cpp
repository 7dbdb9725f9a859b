// engine/cuda/loss.cpp: the softmax cross-entropy op around loss.cu's fused
// kernel. Totals stay on the device until read_results(), which copies them
// back (the only synchronisation the loss asks for) and clears them.
#include <algorithm>
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

class CudaLoss final : public LossOp {
 public:
  CudaLoss(CudaBackend& be, CudaTensor* logits, CudaTensor* dlogits, CudaTensor* labels_tensor)
      : be_(be), logits_(logits), dlogits_(dlogits) {
    if (logits->dims.size() != 2) throw std::logic_error("softmax cross-entropy needs [N, K] logits");
    labels = labels_tensor;
    totals_ = be.declare_buffer("loss.totals", {1}, sizeof(LossTotals), TensorRole::workspace);
    grad_scale_ = be.declare_buffer("loss.grad_scale", {1}, sizeof(float), TensorRole::workspace);
  }

  using LossOp::forward_backward;
  void set_grad_scale(float grad_scale) override {
    if (uploaded_ && grad_scale == grad_scale_host_) return;  // unchanged: no copy per step
    uploaded_ = true;
    grad_scale_host_ = grad_scale;
    CUDA_CHECK(cudaMemcpyAsync(grad_scale_->data, &grad_scale_host_, sizeof(float),
                               cudaMemcpyHostToDevice, be_.stream()));
  }
  void forward_backward(int valid_rows) override { run(valid_rows, true); }
  void forward(int valid_rows) override { run(valid_rows, false); }

  Results read_results() override {
    LossTotals t{};
    CUDA_CHECK(cudaMemcpyAsync(&t, totals_->data, sizeof t, cudaMemcpyDeviceToHost, be_.stream()));
    CUDA_CHECK(cudaMemsetAsync(totals_->data, 0, sizeof t, be_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
    if (t.bad_label) throw std::runtime_error("loss: a label is outside [0, num_classes)");
    return {t.loss_sum, static_cast<int64_t>(t.correct), static_cast<int>(t.rows)};
  }

 private:
  void run(int valid, bool backward) {
    const int64_t n = logits_->dims[0], k = logits_->dims[1];
    const int64_t ld = std::max(k, logits_->c_pad);  // stored columns a row
    if (valid < 0 || valid > n) throw std::invalid_argument("loss: valid rows out of range");
    softmax_cross_entropy(logits_->data, dlogits_->data, be_.activation_type(),
                          static_cast<const int32_t*>(labels->data), n, valid, k, ld,
                          static_cast<const float*>(grad_scale_->data), backward,
                          static_cast<LossTotals*>(totals_->data), be_.stream());
  }

  CudaBackend& be_;
  CudaTensor* logits_;
  CudaTensor* dlogits_;
  CudaTensor* totals_ = nullptr;
  CudaTensor* grad_scale_ = nullptr;
  float grad_scale_host_ = 1.0f;  // the source of the last upload (pageable: copied at once)
  bool uploaded_ = false;
};

}  // namespace

std::unique_ptr<LossOp> make_softmax_cross_entropy(CudaBackend& be, CudaTensor* logits,
                                                   CudaTensor* dlogits, CudaTensor* labels) {
  return std::make_unique<CudaLoss>(be, logits, dlogits, labels);
}

}  // namespace xrun::cuda
