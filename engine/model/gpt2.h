// engine/model/gpt2.h: the one model definition of the GPT-2 family (issue
// #25), written once against the Backend interface as resnet.h is: Hugging
// Face transformers' GPT2LMHeadModel with dropout 0 (pre-LayerNorm blocks,
// causal self-attention from one fused projection, GELU in its tanh form,
// learned position embeddings, the output layer tied to the token
// embedding). Tensor names are its state_dict keys
// ("transformer.h.0.attn.c_attn.weight", Conv1D weights [in, out]), so
// checkpoints load into transformers unchanged; the tied lm_head.weight is
// the token embedding and is not a state entry of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/gpt2_shapes.h"
#include "engine/backend.h"
#include "engine/model/model.h"

namespace xrun {

struct Gpt2Spec {
  Gpt2Shape shape;
  int64_t batch = 4;    // sequences per step
  int64_t tokens = 64;  // tokens per sequence (at most shape.context)
};

class Gpt2 final : public Model {
 public:
  // Builds every op on `backend` (declares all tensors); call
  // backend.allocate() afterwards, then init_parameters or load weights.
  // std::invalid_argument for a shape gpt2_shape_problem refuses or a
  // sequence longer than the context.
  Gpt2(Backend& backend, const Gpt2Spec& spec);
  ~Gpt2();
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  void forward(bool training) override;  // tokens() -> logits() (dropout 0: training or not alike)
  // dlogits() -> every parameter gradient; `ready` gets each block's
  // parameters once they are final, the embeddings last (wte's gradient has
  // two parts: the tied output layer's, then the embedding's).
  void backward(const ParamsReady& ready = {}) override;

  Tensor* tokens() const { return tokens_; }  // int32 [batch, tokens]
  Tensor* logits() const override;            // [batch * tokens, vocab]
  Tensor* dlogits() const override;
  int64_t rows_per_sample() const override { return spec_.tokens; }
  const Gpt2Spec& spec() const { return spec_; }

  const std::vector<StateEntry>& state() const override { return state_; }
  // The parameters AdamW leaves undecayed: every one that is not a matrix
  // (biases and layer norms), as nanoGPT and llm.c group them.
  std::vector<Tensor*> undecayed_parameters() const override;

  // transformers' _init_weights: every matrix and embedding normal(0, 0.02),
  // the residual projections (attn.c_proj, mlp.c_proj) normal(0, 0.02 /
  // sqrt(2 layers)), biases 0, layer norms weight 1 and bias 0.
  void init_parameters(uint64_t seed) override;
  std::string describe() const override;  // "GPT-2 (2 layers, 2 heads, width 32, ...)"
  std::vector<TiedWeight> tied_weights() const override {
    return {{"lm_head.weight", "transformer.wte.weight"}};
  }

  struct Block;

 private:
  void add_state(const std::string& name, Tensor* t, Tensor* g);

  Backend& backend_;
  Gpt2Spec spec_;
  Tensor* tokens_ = nullptr;
  std::unique_ptr<EmbeddingOp> embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<LayerNormOp> ln_f_;
  std::unique_ptr<LinearOp> lm_head_;
  std::vector<StateEntry> state_;
};

}  // namespace xrun
