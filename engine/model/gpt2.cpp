// engine/model/gpt2.cpp: see gpt2.h. One block, as GPT2Block computes it:
//   a = x + attn.c_proj(attention(attn.c_attn(ln_1(x))))
//   x' = a + mlp.c_proj(gelu(mlp.c_fc(ln_2(a))))
// The residual stream's gradient: each residual add copies its output's
// gradient to both inputs, then the layer norm that also read the input
// adds its part (made with add_to_dx); the last stream, read by ln_f only,
// gets ln_f's gradient written.
#include "engine/model/gpt2.h"

#include <cmath>
#include <stdexcept>

#include "engine/model/init_rng.h"

namespace xrun {

struct Gpt2::Block {
  std::string name;  // "transformer.h.3"
  std::unique_ptr<LayerNormOp> ln_1, ln_2;
  std::unique_ptr<LinearOp> c_attn, attn_proj, c_fc, mlp_proj;
  std::unique_ptr<ActivationOp> attn, gelu;
  std::unique_ptr<ResidualAddOp> add_attn, add_mlp;
  std::vector<Tensor*> params;  // for ParamsReady
};


Gpt2::Gpt2(Backend& backend, const Gpt2Spec& spec) : backend_(backend), spec_(spec) {
  const Gpt2Shape& s = spec.shape;
  if (const std::string problem = gpt2_shape_problem(s); !problem.empty())
    throw std::invalid_argument("gpt2: " + problem);
  if (spec.tokens < 1 || spec.tokens > s.context)
    throw std::invalid_argument("gpt2: " + std::to_string(spec.tokens) +
                                " tokens per sequence, the context holds " +
                                std::to_string(s.context));
  if (spec.batch < 1) throw std::invalid_argument("gpt2: batch must be at least 1");
  const int64_t c = s.width;

  tokens_ = backend.token_input(spec.batch, spec.tokens);
  embedding_ = backend.embedding("transformer.wte", "transformer.wpe", tokens_, s.vocab,
                                 s.context, c);
  add_state("transformer.wte.weight", embedding_->wte, embedding_->wte_grad);
  add_state("transformer.wpe.weight", embedding_->wpe, embedding_->wpe_grad);

  Tensor* x = embedding_->y;
  Tensor* dx = embedding_->dy;
  for (int64_t l = 0; l < s.layers; ++l) {
    auto b = std::make_unique<Block>();
    b->name = "transformer.h." + std::to_string(l);
    const std::string& at = b->name;
    b->ln_1 = backend.layer_norm(at + ".ln_1", x, dx, /*add_to_dx=*/true);
    b->c_attn = backend.linear_in_out(at + ".attn.c_attn", b->ln_1->y, b->ln_1->dy, 3 * c);
    b->attn = backend.causal_attention(at + ".attn", b->c_attn->y, b->c_attn->dy, spec.batch,
                                       s.heads);
    b->attn_proj = backend.linear_in_out(at + ".attn.c_proj", b->attn->y, b->attn->dy, c);
    b->add_attn = backend.residual_add(at + ".attn.residual", x, dx, b->attn_proj->y,
                                       b->attn_proj->dy);
    Tensor* a = b->add_attn->y;
    Tensor* da = b->add_attn->dy;
    b->ln_2 = backend.layer_norm(at + ".ln_2", a, da, /*add_to_dx=*/true);
    b->c_fc = backend.linear_in_out(at + ".mlp.c_fc", b->ln_2->y, b->ln_2->dy, 4 * c);
    b->gelu = backend.gelu(at + ".mlp.act", b->c_fc->y, b->c_fc->dy);
    b->mlp_proj = backend.linear_in_out(at + ".mlp.c_proj", b->gelu->y, b->gelu->dy, c);
    b->add_mlp = backend.residual_add(at + ".mlp.residual", a, da, b->mlp_proj->y,
                                      b->mlp_proj->dy);
    x = b->add_mlp->y;
    dx = b->add_mlp->dy;

    const auto ln = [&](const std::string& n, LayerNormOp& op) {
      add_state(at + n + ".weight", op.gamma, op.gamma_grad);
      add_state(at + n + ".bias", op.beta, op.beta_grad);
      b->params.insert(b->params.end(), {op.gamma, op.beta});
    };
    const auto linear = [&](const std::string& n, LinearOp& op) {
      add_state(at + n + ".weight", op.weight, op.weight_grad);
      add_state(at + n + ".bias", op.bias, op.bias_grad);
      b->params.insert(b->params.end(), {op.weight, op.bias});
    };
    ln(".ln_1", *b->ln_1);
    linear(".attn.c_attn", *b->c_attn);
    linear(".attn.c_proj", *b->attn_proj);
    ln(".ln_2", *b->ln_2);
    linear(".mlp.c_fc", *b->c_fc);
    linear(".mlp.c_proj", *b->mlp_proj);
    blocks_.push_back(std::move(b));
  }
  ln_f_ = backend.layer_norm("transformer.ln_f", x, dx, /*add_to_dx=*/false);
  add_state("transformer.ln_f.weight", ln_f_->gamma, ln_f_->gamma_grad);
  add_state("transformer.ln_f.bias", ln_f_->beta, ln_f_->beta_grad);
  lm_head_ = backend.linear_tied("lm_head", ln_f_->y, ln_f_->dy, embedding_->wte,
                                 embedding_->wte_grad);
}

Gpt2::~Gpt2() = default;

void Gpt2::add_state(const std::string& name, Tensor* t, Tensor* g) {
  state_.push_back({name, StateEntry::Kind::parameter, t, g, t->dims});
}

Tensor* Gpt2::logits() const { return lm_head_->y; }
Tensor* Gpt2::dlogits() const { return lm_head_->dy; }


std::vector<Tensor*> Gpt2::undecayed_parameters() const {
  std::vector<Tensor*> out;
  for (const auto& e : state_)
    if (e.dims.size() < 2) out.push_back(e.tensor);
  return out;
}

std::string Gpt2::describe() const {
  const Gpt2Shape& s = spec_.shape;
  return "GPT-2 (" + std::to_string(s.layers) + " layers, " + std::to_string(s.heads) +
         " heads, width " + std::to_string(s.width) + ", context " + std::to_string(s.context) +
         ", vocabulary " + std::to_string(s.vocab) + ")";
}

void Gpt2::init_parameters(uint64_t seed) {
  InitRng rng(seed ^ 0x9e3779b97f4a7c15ull);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(spec_.shape.layers));
  std::vector<float> values;
  for (const auto& e : state_) {
    const std::string& n = e.name;
    values.assign(e.tensor->numel(), 0.0f);
    const bool ln = n.find(".ln_") != std::string::npos;
    if (e.dims.size() == 2) {
      const bool residual = n.find("c_proj.weight") != std::string::npos;
      const double std = residual ? residual_std : 0.02;
      for (auto& v : values) v = static_cast<float>(rng.normal() * std);
    } else if (ln && n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0) {
      std::fill(values.begin(), values.end(), 1.0f);
    }  // biases 0
    backend_.write(e.tensor, values);
  }
}

void Gpt2::forward(bool) {
  {
    LayerHookScope h(hooks_, "transformer.wte");
    embedding_->forward();
  }
  for (auto& b : blocks_) {
    LayerHookScope h(hooks_, b->name);
    b->ln_1->forward();
    b->c_attn->forward();
    b->attn->forward();
    b->attn_proj->forward();
    b->add_attn->forward();
    b->ln_2->forward();
    b->c_fc->forward();
    b->gelu->forward();
    b->mlp_proj->forward();
    b->add_mlp->forward();
  }
  {
    LayerHookScope h(hooks_, "transformer.ln_f");
    ln_f_->forward();
  }
  LayerHookScope h(hooks_, "lm_head");
  lm_head_->forward();
}

void Gpt2::backward(const ParamsReady& ready) {
  {
    LayerHookScope h(hooks_, "lm_head");
    lm_head_->backward();  // writes wte's gradient: the embedding adds its part below
  }
  {
    LayerHookScope h(hooks_, "transformer.ln_f");
    ln_f_->backward();
    if (ready) {
      Tensor* p[] = {ln_f_->gamma, ln_f_->beta};
      ready(p);
    }
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Block& b = **it;
    LayerHookScope h(hooks_, b.name);
    b.add_mlp->backward();
    b.mlp_proj->backward();
    b.gelu->backward();
    b.c_fc->backward();
    b.ln_2->backward();
    b.add_attn->backward();
    b.attn_proj->backward();
    b.attn->backward();
    b.c_attn->backward();
    b.ln_1->backward();
    if (ready) ready(b.params);
  }
  LayerHookScope h(hooks_, "transformer.wte");
  embedding_->backward();
  if (ready) {
    Tensor* p[] = {embedding_->wte, embedding_->wpe};
    ready(p);
  }
}

}  // namespace xrun
