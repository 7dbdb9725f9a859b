// engine/cuda/attention.cpp: GPT-2's causal self-attention on the device, as
// llm.c's first CUDA attention: q, k, v split into per-head blocks
// [B, H, T, hs], the scores for every (batch row, head) pair in one strided
// batched GEMM (scaled by 1/sqrt(hs) there), the causal softmax in place
// (attention.cu), the weighted sum in a second batched GEMM, the heads
// merged back into rows. The probabilities [B, H, T, T] are kept for the
// backward pass (an activation, in the run's storage type); everything else
// lives in the backend's shared op scratch, live only inside one call.
// Backward: dP = dY V^T, dV = P^T dY, dS = softmax backward, dQ = dS K / sqrt(hs),
// dK = dS^T Q / sqrt(hs). Quadratic memory in T, as the CPU engine's; a fused
// (FlashAttention-style) kernel can replace it behind the same op.
#include <cmath>
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

int i32(int64_t v) { return static_cast<int>(v); }

class CudaAttention final : public ActivationOp {
 public:
  CudaAttention(CudaBackend& be, const std::string& name, CudaTensor* qkv, CudaTensor* dqkv,
                int64_t batch, int64_t heads)
      : be_(be), qkv_(qkv), dqkv_(dqkv), b_(batch), h_(heads) {
    if (qkv->dims.size() != 2 || qkv->layout != Layout::nhwc || qkv->c_pad != qkv->dims[1] ||
        qkv->dims[1] % 3 != 0 || qkv->dims[0] % batch != 0)
      throw std::logic_error(name + ": expects the fused projection [B*T, 3C]");
    c_ = qkv->dims[1] / 3;
    t_ = qkv->dims[0] / batch;
    if (heads < 1 || c_ % heads != 0) throw std::logic_error(name + ": width not a multiple of heads");
    hs_ = c_ / heads;
    const int64_t rows = qkv->dims[0];
    y = be.declare_activation(name + ".y", {rows, c_}, c_, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", {rows, c_}, c_, TensorRole::activation_grad);
    const size_t e = element_size(be.activation_type());
    const int64_t scores = b_ * h_ * t_ * t_;
    att_ = be.declare_buffer(name + ".probabilities", {b_, h_, t_, t_},
                             static_cast<size_t>(scores) * e, TensorRole::activation,
                             be.activation_type());
    // Scratch: forward q, k, v and y by heads (4 B T C); backward q, k, v,
    // dy by heads, dP/dS and dq, dk, dv (7 B T C + B H T T).
    block_ = static_cast<size_t>(b_ * t_ * c_) * e;
    be.need_scratch(7 * block_ + static_cast<size_t>(scores) * e);
    be.need_workspace(size_t{32} << 20);
  }

  void forward() override {
    char* s = static_cast<char*>(be_.scratch());
    void *q = s, *k = s + block_, *v = s + 2 * block_, *yh = s + 3 * block_;
    const DataType dt = be_.activation_type();
    split_heads(qkv_->data, dt, b_, t_, h_, hs_, q, k, v, be_.stream());
    // S^T per pair = K Q^T / sqrt(hs): column-major [T(u), T(t)], i.e. S row-major.
    batched(CUBLAS_OP_T, CUBLAS_OP_N, t_, t_, hs_, k, hs_, t_ * hs_, q, hs_, t_ * hs_, att_->data,
            t_, t_ * t_, scale());
    causal_softmax(att_->data, dt, b_ * h_, t_, be_.stream());
    // Y^T [hs, T] = V^T [hs, T(u)] P^T [T(u), T]
    batched(CUBLAS_OP_N, CUBLAS_OP_N, hs_, t_, t_, v, hs_, t_ * hs_, att_->data, t_, t_ * t_, yh,
            hs_, t_ * hs_, 1.0f);
    heads_to_rows(yh, dt, b_, t_, h_, hs_, y->data, be_.stream());
  }

  void backward() override {
    if (!dqkv_) throw std::logic_error("attention: backward without dqkv");
    char* s = static_cast<char*>(be_.scratch());
    void *q = s, *k = s + block_, *v = s + 2 * block_, *dyh = s + 3 * block_;
    void *dq = s + 4 * block_, *dk = s + 5 * block_, *dv = s + 6 * block_;
    void* dp = s + 7 * block_;
    const DataType dt = be_.activation_type();
    split_heads(qkv_->data, dt, b_, t_, h_, hs_, q, k, v, be_.stream());
    rows_to_heads(dy->data, dt, b_, t_, h_, hs_, dyh, be_.stream());
    // dP[t, u] = dY[t] . V[u]: column-major dP^T = V dY^T -> (T, N) over [hs, T].
    batched(CUBLAS_OP_T, CUBLAS_OP_N, t_, t_, hs_, v, hs_, t_ * hs_, dyh, hs_, t_ * hs_, dp, t_,
            t_ * t_, 1.0f);
    // dV^T [hs, T(u)] = dY^T [hs, T] P [T, T(u)]
    batched(CUBLAS_OP_N, CUBLAS_OP_T, hs_, t_, t_, dyh, hs_, t_ * hs_, att_->data, t_, t_ * t_, dv,
            hs_, t_ * hs_, 1.0f);
    causal_softmax_backward(att_->data, dp, dt, b_ * h_, t_, be_.stream());
    // dQ^T [hs, T] = K^T [hs, T(u)] dS^T [T(u), T] / sqrt(hs)
    batched(CUBLAS_OP_N, CUBLAS_OP_N, hs_, t_, t_, k, hs_, t_ * hs_, dp, t_, t_ * t_, dq, hs_,
            t_ * hs_, scale());
    // dK^T [hs, T(u)] = Q^T [hs, T] dS [T, T(u)] / sqrt(hs)
    batched(CUBLAS_OP_N, CUBLAS_OP_T, hs_, t_, t_, q, hs_, t_ * hs_, dp, t_, t_ * t_, dk, hs_,
            t_ * hs_, scale());
    merge_head_grads(dq, dk, dv, dt, b_, t_, h_, hs_, dqkv_->data, be_.stream());
  }

 private:
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs_))); }
  // One GEMM per (batch row, head) pair, column-major, in the run's GEMM type.
  void batched(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
               const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
               int64_t stride_b, void* c, int64_t ldc, int64_t stride_c, float alpha) {
    const float zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        be_.cublas(), ta, tb, i32(m), i32(n), i32(k), &alpha, a, be_.gemm_type(), i32(lda),
        stride_a, b, be_.gemm_type(), i32(ldb), stride_b, &zero, c, be_.gemm_type(), i32(ldc),
        stride_c, i32(b_ * h_), be_.gemm_compute(), CUBLAS_GEMM_DEFAULT));
  }

  CudaBackend& be_;
  CudaTensor* qkv_;
  CudaTensor* dqkv_;
  int64_t b_, h_, c_ = 0, t_ = 0, hs_ = 0;
  CudaTensor* att_ = nullptr;
  size_t block_ = 0;  // bytes of one [B, H, T, hs] block
};

}  // namespace

std::unique_ptr<ActivationOp> make_causal_attention(CudaBackend& be, const std::string& name,
                                                    CudaTensor* qkv, CudaTensor* dqkv,
                                                    int64_t batch, int64_t heads) {
  return std::make_unique<CudaAttention>(be, name, qkv, dqkv, batch, heads);
}

}  // namespace xrun::cuda
