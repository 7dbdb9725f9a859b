// engine/cuda/gpt2_pointwise.cpp: GPT-2's parameter-free and table ops on the
// device around gpt2_pointwise.cu: the token + position embedding (its
// tables fp32; wte has a half copy in fp16/bf16 runs, for the tied output
// layer's GEMM; its rows padded to a multiple of 64, zero, as llm.c pads
// 50257 to 50304, so the tied layer's GEMMs get aligned leading
// dimensions; checkpoints and read()/write() see the V rows), GELU and the
// residual sum.
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

constexpr int64_t kVocabAlign = 64;

void check_rows(const std::string& name, const CudaTensor* x) {
  if (x->dims.size() != 2 || x->layout != Layout::nhwc || x->c_pad != x->dims[1])
    throw std::logic_error(name + ": expects a plain [rows, C] activation, got " + x->name);
}

class CudaEmbedding final : public EmbeddingOp {
 public:
  CudaEmbedding(CudaBackend& be, const std::string& wte_name, const std::string& wpe_name,
                CudaTensor* tokens, int64_t vocab, int64_t context, int64_t width)
      : be_(be), tokens_(tokens), vocab_(vocab), c_(width) {
    if (tokens->dims.size() != 2 || tokens->dtype != DType::i32)
      throw std::logic_error("embedding: expects the int32 token input [B, T]");
    t_ = tokens->dims[1];
    rows_ = tokens->dims[0] * t_;
    if (t_ > context) throw std::logic_error("embedding: rows longer than the context");
    // wte: the tied output layer's GEMM reads its half copy.
    const int64_t padded = (vocab + kVocabAlign - 1) / kVocabAlign * kVocabAlign;
    auto [e, eg] = be.declare_parameter(wte_name + ".weight", {vocab, width}, Layout::plain, 0,
                                        true, padded - vocab);
    auto [p, pg] = be.declare_parameter(wpe_name + ".weight", {context, width}, Layout::plain, 0,
                                        false);
    wte = e, wte_grad = eg, wpe = p, wpe_grad = pg;
    y = be.declare_activation(wte_name + ".y", {rows_, width}, width, TensorRole::activation);
    dy = be.declare_activation(wte_name + ".dy", {rows_, width}, width, TensorRole::activation_grad);
  }
  void forward() override {
    embedding_forward(static_cast<const int32_t*>(tokens_->data), f(wte), f(wpe), rows_, t_, c_,
                      vocab_, y->data, be_.activation_type(), be_.stream());
  }
  // wpe's gradient written (the positions past T zeroed first); wte's added
  // to what the tied output layer wrote (its fp32 part).
  void backward() override {
    CUDA_CHECK(cudaMemsetAsync(wpe_grad->data, 0, wpe_grad->bytes, be_.stream()));
    embedding_backward(static_cast<const int32_t*>(tokens_->data), dy->data,
                       be_.activation_type(), rows_, t_, c_, vocab_, f(wte_grad), f(wpe_grad),
                       be_.stream());
  }

 private:
  static float* f(Tensor* t) { return static_cast<float*>(t->data); }
  CudaBackend& be_;
  CudaTensor* tokens_;
  int64_t vocab_, c_, t_ = 0, rows_ = 0;
};

class CudaGelu final : public ActivationOp {
 public:
  CudaGelu(CudaBackend& be, const std::string& name, CudaTensor* x, CudaTensor* dx)
      : be_(be), x_(x), dx_(dx) {
    check_rows(name, x);
    y = be.declare_activation(name + ".y", x->dims, x->c_pad, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", x->dims, x->c_pad, TensorRole::activation_grad);
  }
  void forward() override {
    gelu_forward(x_->data, y->data, be_.activation_type(), x_->numel(), be_.stream());
  }
  void backward() override {
    gelu_backward(x_->data, dy->data, dx_->data, be_.activation_type(), x_->numel(), be_.stream());
  }

 private:
  CudaBackend& be_;
  CudaTensor* x_;
  CudaTensor* dx_;
};

class CudaResidualAdd final : public ResidualAddOp {
 public:
  CudaResidualAdd(CudaBackend& be, const std::string& name, CudaTensor* a, CudaTensor* da,
                  CudaTensor* b, CudaTensor* db)
      : be_(be), a_(a), da_(da), b_(b), db_(db) {
    check_rows(name, a);
    if (a->dims != b->dims || a->c_pad != b->c_pad)
      throw std::logic_error(name + ": the two inputs differ in shape");
    y = be.declare_activation(name + ".y", a->dims, a->c_pad, TensorRole::activation);
    dy = be.declare_activation(name + ".dy", a->dims, a->c_pad, TensorRole::activation_grad);
  }
  void forward() override {
    add(a_->data, b_->data, y->data, be_.activation_type(), a_->numel(), be_.stream());
  }
  void backward() override {
    for (CudaTensor* d : {da_, db_})
      CUDA_CHECK(cudaMemcpyAsync(d->data, dy->data, dy->bytes, cudaMemcpyDeviceToDevice,
                                 be_.stream()));
  }

 private:
  CudaBackend& be_;
  CudaTensor* a_;
  CudaTensor* da_;
  CudaTensor* b_;
  CudaTensor* db_;
};

}  // namespace

std::unique_ptr<EmbeddingOp> make_embedding(CudaBackend& be, const std::string& wte_name,
                                            const std::string& wpe_name, CudaTensor* tokens,
                                            int64_t vocab, int64_t context, int64_t width) {
  return std::make_unique<CudaEmbedding>(be, wte_name, wpe_name, tokens, vocab, context, width);
}

std::unique_ptr<ActivationOp> make_gelu(CudaBackend& be, const std::string& name, CudaTensor* x,
                                        CudaTensor* dx) {
  return std::make_unique<CudaGelu>(be, name, x, dx);
}

std::unique_ptr<ResidualAddOp> make_residual_add(CudaBackend& be, const std::string& name,
                                                 CudaTensor* a, CudaTensor* da, CudaTensor* b,
                                                 CudaTensor* db) {
  return std::make_unique<CudaResidualAdd>(be, name, a, da, b, db);
}

}  // namespace xrun::cuda
