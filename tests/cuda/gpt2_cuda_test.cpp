// tests/cuda/gpt2_cuda_test.cpp: GPT-2's op families on the CUDA engine
// against the CPU engine (the oracle, itself checked against float64 and
// transformers in tests/engine/gpt2_*_test.cpp) on the same inputs and
// weights, in fp32, tf32, fp16 and bf16: the token + position embedding
// (wte's gradient added to, wpe's written), layer norm (dx written or added
// to), the Conv1D layers, the tied output layer, causal self-attention, GELU,
// the residual add, load_tokens with the loss over a vocabulary's width,
// AdamW's weight decay left off biases and layer norms, clip_grad_norm (on
// gradients written alike, accumulated, and a backward pass's own, half
// mirror included), and two whole training steps of a small GPT-2
// (engine/model/gpt2.h).
//
// test_cuda's main (cuda_main.cpp) runs none of this where no GPU can run
// this build's kernels: CTest then reports every case as skipped.
//
// Errors are judged per tensor by the normalised mean squared error
//   NMSE = sum (gpu - cpu)^2 / sum cpu^2
// as in cuda_vs_cpu_test.cpp: per op fp32 1e-9, tf32 and fp16 1e-5, bf16
// 1e-4 (op_threshold); 10x that for a chain of ops (attention, the training
// steps), each stated where it is used. Inputs are rounded to what the GPU
// stores first (representable), so both engines see the same numbers and
// the comparison measures only the rounding inside the op. A gradient an
// op WRITES (an activation's, wpe's, the tied layer's wte) is pre-filled
// with other values first, so a kernel that added instead of writing fails;
// where the interface says a gradient is ADDED to (wte's in the embedding,
// dx of a layer norm made with add_to_dx), what was there is kept and the
// added part is compared too. The Conv1D and layer norm parameter gradients
// are not pre-filled: in fp16/bf16 runs the CUDA engine writes a GEMM's
// weight gradient to a half-precision mirror that read() adds to the fp32
// part, and write() fills that fp32 part, which no step of training
// touches: a state training never reaches. The training-step case (two
// steps, nothing zeroed between them) shows those gradients written rather
// than added where it matters. XRUN_TEST_ERRORS=1 prints every NMSE.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/gpt2.h"
#include "engine/torch_parity.h"

using namespace xrun;
using namespace xrun::cudatest;
namespace parity = xrun::testing::parity;

namespace {

// `n` values uniform in [lo, hi), rounded to what precision `p` stores.
std::vector<float> draw(int64_t n, uint32_t seed, float lo, float hi, const std::string& p) {
  return representable(random_floats(n, seed, lo, hi), p);
}

std::vector<float> minus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

// A [batch * tokens, width] activation and its gradient for the op under
// test: the embedding's output, as in the model (the CUDA engine's input()
// is for images of at most 16 channels). The test writes x itself; the
// embedding never runs.
struct Rows {
  std::unique_ptr<EmbeddingOp> embedding;
  Tensor* x = nullptr;
  Tensor* dx = nullptr;
};

Rows rows_of(Backend& be, int64_t batch, int64_t tokens, int64_t width) {
  Rows r;
  Tensor* t = be.token_input(batch, tokens);
  r.embedding = be.embedding("transformer.wte", "transformer.wpe", t, 4, tokens, width);
  r.x = r.embedding->y;
  r.dx = r.embedding->dy;
  return r;
}

std::string rows_what(int64_t batch, int64_t tokens, int64_t width) {
  return "B" + std::to_string(batch) + " T" + std::to_string(tokens) + " C" +
         std::to_string(width);
}

// The small GPT-2 of the optimizer and training-step cases: 2 layers, 2
// heads, width 64, context 32, a vocabulary of 97 (no multiple of 8: the
// output GEMM's odd edge), 2 sequences of 32 tokens.
Gpt2Spec small_gpt2() {
  Gpt2Spec spec;
  spec.shape = {2, 2, 64, 32, 97};
  spec.batch = 2;
  spec.tokens = 32;
  return spec;
}

}  // namespace

TEST_CASE("cuda gpt2 embedding: rows are wte of the token plus wpe of the position, wte's "
          "gradient added to, wpe's written",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, vocab, width, context, distinct;
  };
  // The second draws its tokens from 3 values only: many rows add into the
  // same wte row (the CUDA engine's atomics), and positions past T (context
  // 64, T 16) must come out with a zero gradient.
  const std::vector<Shape> shapes = {{2, 32, 97, 64, 32, 97}, {4, 16, 1000, 768, 64, 3}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what = rows_what(s.batch, s.tokens, s.width) + " V" +
                               std::to_string(s.vocab) + ", " + std::to_string(s.distinct) +
                               " distinct tokens";
      compare_backends("embedding", p, op_threshold(p), what, [&](Backend& be) {
        Tensor* tokens = be.token_input(s.batch, s.tokens);
        auto emb = be.embedding("transformer.wte", "transformer.wpe", tokens, s.vocab, s.context,
                                s.width);
        // load_tokens writes the loss's labels too: the model's head and loss.
        auto head = be.linear_tied("lm_head", emb->y, emb->dy, emb->wte, emb->wte_grad);
        auto loss = be.softmax_cross_entropy(head->y, head->dy);
        be.allocate();
        be.write(emb->wte, draw(emb->wte->numel(), 1, -1, 1, p));
        be.write(emb->wpe, draw(emb->wpe->numel(), 2, -0.5f, 0.5f, p));
        const int64_t n = s.batch * s.tokens;
        std::vector<int32_t> ids(n), targets(n);
        for (int64_t r = 0; r < n; ++r) {
          ids[r] = static_cast<int32_t>(((r * 7 + r / 3) % s.distinct) * (s.vocab / s.distinct));
          targets[r] = static_cast<int32_t>((r * 5 + 1) % s.vocab);
        }
        be.load_tokens(ids.data(), targets.data(), static_cast<int>(s.batch));
        // wte's gradient as the tied output layer left it; wpe's must be
        // overwritten, past T too.
        const std::vector<float> wte_grad0 = draw(emb->wte_grad->numel(), 3, -0.5f, 0.5f, p);
        be.write(emb->wte_grad, wte_grad0);
        be.write(emb->wpe_grad, draw(emb->wpe_grad->numel(), 4, -3, 3, p));
        be.write(emb->dy, draw(emb->dy->numel(), 5, -1, 1, p));
        emb->forward();
        emb->backward();
        const std::vector<float> wte_grad = read(be, emb->wte_grad);
        return Outputs{{"y", read(be, emb->y)},
                       {"wte_grad", wte_grad},
                       {"wte_grad minus what was there", minus(wte_grad, wte_grad0)},
                       {"wpe_grad", read(be, emb->wpe_grad)}};
      });
    }
}

TEST_CASE("cuda gpt2 layer norm: forward and backward, dx written or added to, rows far from "
          "zero mean",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, width;
  };
  // GPT-2's widths 64, 768 (gpt2) and 1600 (gpt2-xl), and 99 (a width
  // gpt2_shape_problem admits, with 3 or 9 heads, say: odd).
  const std::vector<Shape> shapes = {{2, 32, 64}, {1, 32, 768}, {1, 8, 1600}, {1, 13, 99}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes)
      for (const bool add_to_dx : {false, true}) {
        const std::string what =
            rows_what(s.batch, s.tokens, s.width) + (add_to_dx ? ", dx added to" : ", dx written");
        compare_backends("layer_norm", p, op_threshold(p), what, [&](Backend& be) {
          Rows in = rows_of(be, s.batch, s.tokens, s.width);
          auto ln = be.layer_norm("transformer.h.0.ln_1", in.x, in.dx, add_to_dx);
          be.allocate();
          // Every other row sits at 12 +- 1, as a residual stream may drift:
          // there a one-pass E[x^2] - E[x]^2 in fp32 gives an NMSE of 1.5e-9
          // (C 64) to 5e-8 (C 1600) over the tensor, above fp32's threshold,
          // where a two-pass or Welford kernel in fp32 stays near 1e-10
          // (simulated on the host).
          std::vector<float> x = random_floats(in.x->numel(), 11, -1, 1);
          for (int64_t r = 1; r < in.x->dims[0]; r += 2)
            for (int64_t j = 0; j < s.width; ++j) x[r * s.width + j] += 12.0f;
          be.write(in.x, representable(x, p));
          be.write(ln->gamma, draw(s.width, 12, 0.5f, 1.5f, p));
          be.write(ln->beta, draw(s.width, 13, -0.5f, 0.5f, p));
          be.write(ln->dy, draw(ln->dy->numel(), 14, -1, 1, p));
          // What the residual stream's gradient held (add_to_dx), or values
          // that must be overwritten.
          const std::vector<float> dx0 = draw(in.dx->numel(), 15, -1, 1, p);
          be.write(in.dx, dx0);
          ln->forward();
          ln->backward();
          const std::vector<float> dx = read(be, in.dx);
          Outputs out = {{"y", read(be, ln->y)},
                         {"dx", dx},
                         {"dgamma", read(be, ln->gamma_grad)},
                         {"dbeta", read(be, ln->beta_grad)}};
          if (add_to_dx) out["dx minus what was there"] = minus(dx, dx0);
          return out;
        });
      }
}

TEST_CASE("cuda gpt2 Conv1D layers: y = x W + b with W as in, out, and dx, dW, db",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, in, out;
  };
  // attn.c_attn (C -> 3C), mlp.c_proj (4C -> C), and 26 rows (T 13: no
  // multiple of 8) of a width-96 block's mlp.c_fc.
  const std::vector<Shape> shapes = {{2, 32, 64, 192}, {2, 32, 256, 64}, {2, 13, 96, 384}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what = rows_what(s.batch, s.tokens, s.in) + " -> " + std::to_string(s.out);
      compare_backends("conv1d", p, op_threshold(p), what, [&](Backend& be) {
        Rows in = rows_of(be, s.batch, s.tokens, s.in);
        auto lin = be.linear_in_out("transformer.h.0.mlp.c_fc", in.x, in.dx, s.out);
        be.allocate();
        REQUIRE(lin->weight->dims == std::vector<int64_t>{s.in, s.out});
        be.write(in.x, draw(in.x->numel(), 21, -1, 1, p));
        be.write(lin->weight, draw(s.in * s.out, 22, -0.1f, 0.1f, p));
        be.write(lin->bias, draw(s.out, 23, -0.5f, 0.5f, p));
        be.write(lin->dy, draw(lin->dy->numel(), 24, -1, 1, p));
        be.write(in.dx, draw(in.dx->numel(), 25, -3, 3, p));  // must be overwritten
        lin->forward();
        lin->backward();
        return Outputs{{"y", read(be, lin->y)},
                       {"dx", read(be, in.dx)},
                       {"dW", read(be, lin->weight_grad)},
                       {"db", read(be, lin->bias_grad)}};
      });
    }
}

TEST_CASE("cuda gpt2 tied output layer: y = x wte transposed, dx, and wte's gradient written",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, width, vocab;
  };
  const std::vector<Shape> shapes = {{2, 32, 64, 97}, {2, 16, 128, 1000}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what =
          rows_what(s.batch, s.tokens, s.width) + " V" + std::to_string(s.vocab);
      compare_backends("lm_head", p, op_threshold(p), what, [&](Backend& be) {
        Tensor* tokens = be.token_input(s.batch, s.tokens);
        auto emb = be.embedding("transformer.wte", "transformer.wpe", tokens, s.vocab, s.tokens,
                                s.width);
        auto head = be.linear_tied("lm_head", emb->y, emb->dy, emb->wte, emb->wte_grad);
        be.allocate();
        be.write(emb->wte, draw(emb->wte->numel(), 31, -0.1f, 0.1f, p));
        be.write(emb->y, draw(emb->y->numel(), 32, -1, 1, p));
        be.write(head->dy, draw(head->dy->numel(), 33, -1, 1, p));
        // Both gradients are written: dx, and wte's (the embedding adds its
        // part afterwards), whatever they held; in training wte's holds the
        // last step's gradient here, as nothing zeroes gradients.
        be.write(emb->dy, draw(emb->dy->numel(), 34, -3, 3, p));
        be.write(emb->wte_grad, draw(emb->wte_grad->numel(), 35, -3, 3, p));
        head->forward();
        head->backward();
        return Outputs{{"y", read(be, head->y)},
                       {"dx", read(be, emb->dy)},
                       {"wte_grad", read(be, emb->wte_grad)}};
      });
    }
}

TEST_CASE("cuda gpt2 causal attention: forward and backward from the fused qkv, T 13 to 100, "
          "head sizes 16 to 64",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, heads, tokens, width;
  };
  // Head sizes 16, 32, 64 (gpt2's: 12 heads of 64) and 64 again at T 100;
  // T 13 and 100 are no multiples of 32 (a tile's edge).
  const std::vector<Shape> shapes = {{2, 4, 32, 64}, {2, 2, 13, 64}, {1, 12, 64, 768},
                                     {2, 2, 100, 128}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what =
          rows_what(s.batch, s.tokens, s.width) + " H" + std::to_string(s.heads);
      // 10x the per-op threshold: a chain. Forward: the scores' product, the
      // causal softmax, the weighted sum (the scores and probabilities may be
      // kept in the storage type between them); backward: four products and
      // the softmax's gradient, a difference that cancels.
      compare_backends("attention", p, op_threshold(p) * 10, what, [&](Backend& be) {
        Rows in = rows_of(be, s.batch, s.tokens, 3 * s.width);
        auto attn = be.causal_attention("transformer.h.0.attn", in.x, in.dx, s.batch, s.heads);
        be.allocate();
        REQUIRE(attn->y->dims == std::vector<int64_t>{s.batch * s.tokens, s.width});
        // q, k uniform in [-2, 2): scores q.k / sqrt(hs) with a standard
        // deviation of 4/3 at every head size, so the softmax is far from
        // uniform (a wrong scale or mask shows).
        be.write(in.x, draw(in.x->numel(), 41, -2, 2, p));
        be.write(attn->dy, draw(attn->dy->numel(), 42, -1, 1, p));
        be.write(in.dx, draw(in.dx->numel(), 43, -3, 3, p));  // must be overwritten
        attn->forward();
        attn->backward();
        return Outputs{{"y", read(be, attn->y)}, {"dqkv", read(be, in.dx)}};
      });
    }
}

TEST_CASE("cuda gpt2 GELU, tanh form: forward and backward", "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, width;
  };
  // mlp.act at 4C = 256, and 1287 values (odd: a vectorised kernel's tail).
  const std::vector<Shape> shapes = {{2, 32, 256}, {1, 13, 99}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what = rows_what(s.batch, s.tokens, s.width);
      compare_backends("gelu", p, op_threshold(p), what, [&](Backend& be) {
        Rows in = rows_of(be, s.batch, s.tokens, s.width);
        auto gelu = be.gelu("transformer.h.0.mlp.act", in.x, in.dx);
        be.allocate();
        // [-5, 5): both tails, where tanh saturates; and every 16th value
        // out to [-30, 30): exp(-2u) passes float's range below about -10.1
        // (the slope must stay finite there, not inf x 0).
        std::vector<float> x = draw(in.x->numel(), 51, -5, 5, p);
        const std::vector<float> far = draw(in.x->numel(), 54, -30, 30, p);
        for (size_t i = 0; i < x.size(); i += 16) x[i] = far[i];
        be.write(in.x, x);
        be.write(gelu->dy, draw(gelu->dy->numel(), 52, -1, 1, p));
        be.write(in.dx, draw(in.dx->numel(), 53, -3, 3, p));  // must be overwritten
        gelu->forward();
        gelu->backward();
        return Outputs{{"y", read(be, gelu->y)}, {"dx", read(be, in.dx)}};
      });
    }
}

TEST_CASE("cuda gpt2 residual add: y = a + b, and dy written to both inputs' gradients",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, width;
  };
  const std::vector<Shape> shapes = {{2, 32, 64}, {1, 13, 99}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what = rows_what(s.batch, s.tokens, s.width);
      compare_backends("residual", p, op_threshold(p), what, [&](Backend& be) {
        Rows in = rows_of(be, s.batch, s.tokens, s.width);
        Tensor* b = be.tensor_like(in.x, "b", TensorRole::activation);
        Tensor* db = be.tensor_like(in.x, "db", TensorRole::activation_grad);
        auto add = be.residual_add("transformer.h.0.attn.residual", in.x, in.dx, b, db);
        be.allocate();
        be.write(in.x, draw(in.x->numel(), 61, -1, 1, p));
        be.write(b, draw(b->numel(), 62, -1, 1, p));
        be.write(add->dy, draw(add->dy->numel(), 63, -1, 1, p));
        be.write(in.dx, draw(in.dx->numel(), 64, -3, 3, p));  // must be overwritten
        be.write(db, draw(db->numel(), 65, -3, 3, p));        // must be overwritten
        add->forward();
        add->backward();
        return Outputs{{"y", read(be, add->y)}, {"da", read(be, in.dx)}, {"db", read(be, db)}};
      });
    }
}

TEST_CASE("cuda gpt2 load_tokens and the loss over a vocabulary's width: dlogits, loss, hits, "
          "padded rows",
          "[cuda][gpt2]") {
  struct Shape {
    int64_t batch, tokens, vocab;
    int loaded;  // sequences load_tokens writes; the rest are padding
  };
  // 32 rows of 1000 classes, and 8 of gpt2's 50257.
  const std::vector<Shape> shapes = {{4, 8, 1000, 3}, {2, 4, 50257, 1}};
  for (const std::string& p : precisions())
    for (const Shape& s : shapes) {
      const std::string what = std::to_string(s.batch * s.tokens) + " rows (" +
                               std::to_string(s.loaded * s.tokens) + " loaded) x V" +
                               std::to_string(s.vocab);
      compare_backends("gpt2 loss", p, op_threshold(p), what, [&](Backend& be) {
        const int64_t width = 64, n = s.batch * s.tokens;
        Tensor* tokens = be.token_input(s.batch, s.tokens);
        auto emb = be.embedding("transformer.wte", "transformer.wpe", tokens, s.vocab, s.tokens,
                                width);
        auto head = be.linear_tied("lm_head", emb->y, emb->dy, emb->wte, emb->wte_grad);
        auto loss = be.softmax_cross_entropy(head->y, head->dy);
        be.allocate();
        be.write(emb->wte, draw(emb->wte->numel(), 71, -1, 1, p));
        be.write(emb->wpe, draw(emb->wpe->numel(), 72, -1, 1, p));
        const int valid = s.loaded * static_cast<int>(s.tokens);
        std::vector<int32_t> ids(n), targets(n);
        for (int64_t r = 0; r < n; ++r) {
          ids[r] = static_cast<int32_t>((r * 13 + 5) % s.vocab);
          targets[r] = static_cast<int32_t>((r * 7919 + 3) % s.vocab);
        }
        be.load_tokens(ids.data(), targets.data(), s.loaded);
        // The tokens as loaded (rows past `loaded` read token 0).
        emb->forward();
        // Logits in [-4, 4); every third valid row's label holds a clear
        // largest logit (a hit), the others' label at most 3, below the
        // row's largest (about 4), so no tie decides a hit.
        std::vector<float> z = random_floats(n * s.vocab, 73, -4, 4);
        for (int r = 0; r < valid; ++r) {
          float& at_label = z[r * s.vocab + targets[r]];
          at_label = r % 3 == 0 ? 6.0f : std::min(at_label, 3.0f);
        }
        be.write(head->y, representable(z, p));
        be.write(head->dy, draw(n * s.vocab, 74, -3, 3, p));  // padded rows: must become 0
        loss->forward_backward(valid, 8.0f);
        const LossOp::Results r = loss->read_results();
        return Outputs{{"embedding y", read(be, emb->y)},
                       {"dlogits", read(be, head->dy)},
                       {"loss", {static_cast<float>(r.loss_sum / r.rows)}},
                       {"hits and rows",
                        {static_cast<float>(r.correct), static_cast<float>(r.rows)}}};
      });
    }
}

namespace {

// Two AdamW steps over every parameter of the small GPT-2, from parameters
// and gradients the test writes (the same on every engine): the parameters
// after them.
Outputs adamw_steps(Backend& be) {
  Gpt2 model(be, small_gpt2());
  OptimizerSettings s;
  s.name = "adamw";
  s.weight_decay = 0.1;
  auto opt = be.optimizer(s, false);
  be.allocate();
  // As the trainer does: after allocate(), before the first step.
  opt->exclude_from_decay(model.undecayed_parameters());
  uint32_t seed = 81;
  for (const auto& e : model.state()) {
    const bool matrix = e.dims.size() >= 2;
    be.write(e.tensor, random_floats(e.tensor->numel(), seed++, matrix ? -0.1f : 0.5f,
                                     matrix ? 0.1f : 1.5f));
  }
  for (int step = 1; step <= 2; ++step) {
    const float scale = step == 1 ? 1.0f : 4.0f;
    for (const auto& e : model.state()) {
      std::vector<float> g = random_floats(e.grad->numel(), seed++, -1e-2f, 1e-2f);
      for (float& v : g) v *= scale;
      be.write(e.grad, g);
    }
    opt->step({0.1, step, scale, step == 2});
    CHECK_FALSE(opt->found_inf());
  }
  be.synchronize();
  Outputs out;
  for (const auto& e : model.state()) out[e.name] = read(be, e.tensor);
  return out;
}

// Two training steps of the small GPT-2 as the trainer runs them (see the
// case below), the loss scaled by `scale`: each step's loss, step 1's
// logits, each step's gradients (divided by the scale) and the parameters
// after each update.
Outputs training_steps(Backend& be, float scale) {
  const Gpt2Spec spec = small_gpt2();
  const int64_t n = spec.batch * spec.tokens, vocab = spec.shape.vocab;
  Gpt2 model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings s;
  s.name = "adamw";
  s.weight_decay = 0.1;
  s.eps = 1e-4;  // see the case
  auto opt = be.optimizer(s, false);
  be.allocate();
  opt->exclude_from_decay(model.undecayed_parameters());
  model.init_parameters(7);
  // Biases and layer norms moved off init's 0 and 1 (see the case).
  uint32_t seed = 91;
  for (const auto& e : model.state()) {
    if (e.dims.size() >= 2) continue;
    const bool ln_weight = e.name.find(".ln_") != std::string::npos &&
                           e.name.compare(e.name.size() - 7, 7, ".weight") == 0;
    std::vector<float> v = random_floats(e.tensor->numel(), seed++, -0.1f, 0.1f);
    if (ln_weight)
      for (float& x : v) x += 1.0f;
    be.write(e.tensor, v);
  }
  Outputs out;
  for (int step = 1; step <= 2; ++step) {
    const std::string at = "step " + std::to_string(step) + " ";
    std::mt19937 g(static_cast<uint32_t>(100 + step));
    std::vector<int32_t> ids(n), targets(n);
    for (int64_t r = 0; r < n; ++r) {
      ids[r] = static_cast<int32_t>(g() % vocab);
      targets[r] = static_cast<int32_t>(g() % vocab);
    }
    be.load_tokens(ids.data(), targets.data(), static_cast<int>(spec.batch));
    model.forward(true);
    loss->forward_backward(static_cast<int>(n), scale);
    model.backward();
    const LossOp::Results r = loss->read_results();
    REQUIRE(r.rows == n);
    out[at + "loss"] = {static_cast<float>(r.loss_sum / r.rows)};
    if (step == 1) out[at + "logits"] = read(be, model.logits());
    for (const auto& e : model.state()) {
      std::vector<float> grad = read(be, e.grad);
      for (float& v : grad) v /= scale;
      out[at + "grad " + e.name] = std::move(grad);
    }
    opt->step({1e-3, step, scale, true});
    CHECK_FALSE(opt->found_inf());
    for (const auto& e : model.state()) out[at + e.name] = read(be, e.tensor);
  }
  return out;
}

}  // namespace

TEST_CASE("cuda gpt2 AdamW: the biases and layer norms GPT-2 leaves out of the weight decay do "
          "not decay",
          "[cuda][gpt2]") {
  // Every parameter of the small GPT-2 and two steps' gradients written
  // alike on both engines; lr 0.1 and weight decay 0.1 multiply a decayed
  // parameter by 0.99 a step. Vectors (biases, layer norms) drawn from
  // [0.5, 1.5): one wrongly decayed moves 1% (NMSE ~1e-4); a matrix wrongly
  // left out misses 1% of values ~0.1 beside steps of ~0.1 (~1e-5): both far
  // above the threshold, fp32's per-op 1e-9 at every precision, as the
  // update is fp32 arithmetic on fp32 values in all four (the half
  // gradient mirror of fp16/bf16 runs holds zeros: no op wrote it). The
  // second step has a gradient scale of 4 and the inf check on.
  for (const std::string& p : precisions())
    compare_backends("gpt2 adamw", p, op_threshold("fp32"), "2 steps, lr 0.1, weight decay 0.1",
                     adamw_steps);
}

TEST_CASE("cuda gpt2: two AdamW training steps of a small GPT-2 match the CPU: loss, logits, "
          "every gradient and parameter",
          "[cuda][gpt2]") {
  // The model as the trainer drives it (engine/trainer.cpp, step_runner.cpp):
  // Gpt2 with the loss on its logits and AdamW (lr 1e-3, weight decay 0.1,
  // matrices only: exclude_from_decay after allocate()), init_parameters
  // with the same seed, the same token windows; per step load_tokens,
  // forward, the loss's forward_backward with the step's gradient scale,
  // backward, the update with the inf check. Nothing zeroes the gradients
  // between the steps (the trainer does not): a gradient added to where it
  // should be written shows in step 2. Compared: each step's loss, step 1's
  // logits, each step's gradients (divided by the gradient scale) and
  // parameters.
  //
  // Thresholds, 10x the per-op ones (a chain: the gradient of wpe passes
  // some thirty ops): fp32 1e-8; tf32 and fp16 1e-4 (GEMM inputs, or every
  // activation and its gradient, rounded at 2^-11 at each op); bf16 1e-3
  // (rounding at 2^-8). The run has no ReLU-like kink (GELU, softmax and
  // layer norm are smooth), so the errors stay that size. The CPU engine
  // with every activation, activation gradient, GEMM weight and GEMM weight
  // gradient rounded to fp16 or bf16 after each op (the storage, not the
  // rounding inside the ops) came out at a worst tensor NMSE of 1.3e-6 in
  // fp16 and 6.3e-5 in bf16 (layer 1's ln_2.weight gradient, step 2).
  //
  // fp16 scales the loss by parity::kFp16LossScale (256), fixed, as
  // cuda_parity_test.cpp does (the trainer's dynamic scale starts at
  // 65536): the smallest gradients here (layer norm weights, ~1e-4 rms)
  // would sit near fp16's normal range (6e-5) unscaled; the largest (~0.04)
  // and the loss's gradient (at most 1/64 a row, 4 scaled) stay far below
  // fp16's 65504. The CPU gets the same scale (a power of two: exact).
  //
  // AdamW's eps is 1e-4, not 1e-8: the first step is lr g / (|g| + eps),
  // with eps 1e-8 lr sign(g) for every gradient above 1e-8, so a gradient
  // within the rounding of zero flips a whole lr-sized step between the
  // engines. Here many are: two thirds of layer 1's attn.c_attn.weight
  // gradient lie below 1% of its RMS at initialisation, and the key bias's
  // gradient is zero but for rounding (softmax ignores a constant score
  // shift). Measured on the CPU engine (its gradients plus noise of a given
  // NMSE): with eps 1e-8 and lr 1e-4 a gradient NMSE of 1e-10 already moved
  // the parameters by an NMSE of 1e-7, above fp32's threshold; with eps
  // 1e-4 the step is smooth in g (slope at most lr / eps) and the
  // parameters' NMSE came out at a tenth of the gradients' for lr 1e-3. The
  // biases and layer norms are moved off init's 0 and 1 (by up to 0.1) for
  // the same reason: a bias that starts at 0 is its own update, so its NMSE
  // would be the update's relative error, where a rounding-level gradient
  // (the key bias's) makes it order 1.
  for (const std::string& p : precisions()) {
    const float scale = p == "fp16" ? parity::kFp16LossScale : 1.0f;
    compare_backends("gpt2 step", p, op_threshold(p) * 10,
                     "2 layers, 2 heads, C64, V97, B2 T32, 2 AdamW steps",
                     [&](Backend& be) { return training_steps(be, scale); });
  }
}

namespace {

// ---- clip_grad_norm (train.clip_grad_norm) ----
//
// OptimizerOp::clip_grad_norm(limit, grad_scale): the L2 norm of every
// gradient divided by grad_scale, in double; where it is above the limit,
// every gradient times limit / (norm + 1e-6). The CPU engine's is the
// default on host_gradients() (engine/backend.cpp); the CUDA engine's
// (optimizer_op.cpp, optimizer.cu) sums squares of the fp32 part plus the
// half-precision mirror per block and scales both parts on the device.

constexpr float kClipGradScale = 4;  // the norm is that of g / 4

// The L2 norm of g / grad_scale over all of `grads`, in double.
double norm_of(const std::vector<std::vector<float>>& grads, float grad_scale) {
  const double inv = 1.0 / grad_scale;
  double sum = 0;
  for (const auto& g : grads)
    for (const float v : g) sum += (v * inv) * (v * inv);
  return std::sqrt(sum);
}

// What clip_grad_norm must leave of g, given the norm of all of them.
std::vector<float> clipped(std::vector<float> g, double norm, double limit) {
  if (!(norm > limit)) return g;
  const auto factor = static_cast<float>(limit / (norm + 1e-6));
  for (float& v : g) v *= factor;
  return g;
}

std::vector<float> joined(const std::vector<std::vector<float>>& parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The limits, as multiples of the norm: half of it (every gradient scaled
// by about 1/2) and twice it (nothing changes). Either way a clip that took
// the norm of g rather than g / 4 (4 times too large) scales by the wrong
// factor: 1/8, and 1/2 where nothing should change.
const std::vector<std::pair<double, std::string>> kClipLimits = {{0.5, "limit half the norm"},
                                                                 {2.0, "limit twice the norm"}};

// Every gradient of the small GPT-2 drawn in [-0.01, 0.01) and multiplied
// by the gradient scale 4 (exact), written alike on every engine, then
// clip_grad_norm(limit, 4): every gradient read back. With `accumulate`,
// two micro-batches' gradients go through accumulate_begin / add / end and
// the clipped sum is read through an SGD step (lr 1, no weight decay or
// momentum, parameters from 0: each becomes -g / 4): the CUDA engine clips
// its accumulation buffer, which the update reads and read() of a gradient
// does not show. Each engine's result is also checked against the host's
// clip of the values written (`precision` names the table's row).
Outputs clip_written(Backend& be, bool accumulate, const std::string& precision) {
  Gpt2 model(be, small_gpt2());
  OptimizerSettings s;
  s.name = "sgd";
  s.weight_decay = 0;
  s.momentum = 0;
  auto opt = be.optimizer(s, accumulate);
  be.allocate();
  const std::string where = be.name() + (accumulate ? ", accumulated" : "");
  uint32_t seed = 201;
  const auto draw_gradients = [&] {
    std::vector<std::vector<float>> gs;
    for (const auto& e : model.state()) {
      std::vector<float> g = random_floats(e.grad->numel(), seed++, -1e-2f, 1e-2f);
      for (float& v : g) v *= kClipGradScale;
      gs.push_back(std::move(g));
    }
    return gs;
  };
  const auto write_gradients = [&](const std::vector<std::vector<float>>& gs) {
    for (size_t i = 0; i < gs.size(); ++i) be.write(model.state()[i].grad, gs[i]);
  };
  Outputs out;
  for (const auto& [ratio, limit_name] : kClipLimits) {
    std::vector<std::vector<float>> g = draw_gradients();
    write_gradients(g);
    if (accumulate) {
      opt->accumulate_begin();
      const std::vector<std::vector<float>> g2 = draw_gradients();
      write_gradients(g2);
      opt->accumulate_add();
      opt->accumulate_end();
      for (size_t i = 0; i < g.size(); ++i)
        for (size_t j = 0; j < g[i].size(); ++j) g[i][j] += g2[i][j];  // as the engines add
      for (const auto& e : model.state())
        be.write(e.tensor, std::vector<float>(e.tensor->numel(), 0.0f));
    }
    const double norm = norm_of(g, kClipGradScale);
    opt->clip_grad_norm(ratio * norm, kClipGradScale);
    std::vector<std::vector<float>> got, want;
    if (accumulate) {
      opt->step({1.0, 1, kClipGradScale, false});
      for (size_t i = 0; i < g.size(); ++i) {
        got.push_back(read(be, model.state()[i].tensor));
        std::vector<float> p = clipped(g[i], norm, ratio * norm);
        for (float& v : p) v = -(v * (1.0f / kClipGradScale));
        want.push_back(std::move(p));
      }
    } else {
      for (size_t i = 0; i < g.size(); ++i) {
        got.push_back(read(be, model.state()[i].grad));
        want.push_back(clipped(g[i], norm, ratio * norm));
      }
    }
    const std::string what =
        (accumulate ? "every parameter after the step, " : "every gradient, ") + limit_name;
    check_nmse(joined(got), joined(want), op_threshold("fp32"), "gpt2 clip", precision,
               where + " against the host: " + what);
    out[what] = joined(got);
  }
  return out;
}

// The small GPT-2's own gradients after a forward and backward pass, the
// loss scaled by `scale`: in fp16/bf16 runs the CUDA engine's Conv1D and
// output layers write their weight gradients to the half-precision mirror
// (wte's split between both parts: the output layer's in the mirror, the
// embedding's added to the fp32 part). Read, clipped with the same scale,
// read again; each engine's clipped gradients checked against its own
// unclipped ones clipped on the host, with `threshold`.
Outputs clip_after_backward(Backend& be, float scale, double threshold,
                            const std::string& precision) {
  const Gpt2Spec spec = small_gpt2();
  const int64_t n = spec.batch * spec.tokens, vocab = spec.shape.vocab;
  Gpt2 model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings s;
  s.name = "sgd";
  s.weight_decay = 0;
  auto opt = be.optimizer(s, false);
  be.allocate();
  model.init_parameters(7);
  std::mt19937 g(211);
  std::vector<int32_t> ids(n), targets(n);
  for (int64_t r = 0; r < n; ++r) {
    ids[r] = static_cast<int32_t>(g() % vocab);
    targets[r] = static_cast<int32_t>(g() % vocab);
  }
  be.load_tokens(ids.data(), targets.data(), static_cast<int>(spec.batch));
  Outputs out;
  for (const auto& [ratio, limit_name] : kClipLimits) {
    // Each limit from fresh gradients: the pass writes every one of them.
    model.forward(true);
    loss->forward_backward(static_cast<int>(n), scale);
    model.backward();
    std::vector<std::vector<float>> before, after;
    for (const auto& e : model.state()) before.push_back(read(be, e.grad));
    const double norm = norm_of(before, scale);
    opt->clip_grad_norm(ratio * norm, scale);
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < before.size(); ++i) {
      after.push_back(read(be, model.state()[i].grad));
      want.push_back(clipped(before[i], norm, ratio * norm));
    }
    const std::string what = "every gradient after a backward pass, " + limit_name;
    check_nmse(joined(after), joined(want), threshold, "gpt2 clip", precision,
               be.name() + " against its own gradients clipped on the host: " + what);
    // Divided by the scale: fp16's differs from the others'.
    std::vector<float> all = joined(after);
    for (float& v : all) v /= scale;
    out[what + ", divided by the scale"] = std::move(all);
  }
  return out;
}

}  // namespace

TEST_CASE("cuda gpt2 clip_grad_norm: the norm of g over the gradient scale, gradients written "
          "alike clipped to a limit below it and untouched above it, the accumulated sum too",
          "[cuda][gpt2]") {
  // Threshold fp32's per-op 1e-9 in every precision: the gradients written
  // sit in the fp32 gradient region in all four (write() fills it, and the
  // half mirror of fp16/bf16 runs holds zeros: no op wrote it), and the clip
  // is fp32 and double arithmetic on them: the squares summed in double
  // (only the order of the sum differs between the engines), the factor
  // rounded to float once, each gradient multiplied by it once. The engines
  // can then differ by an ulp of the factor (NMSE ~1e-14). The accumulated
  // path adds two micro-batches in fp32 on both engines, and the SGD step
  // multiplies by 1/4 (exact).
  for (const std::string& p : precisions())
    for (const bool accumulate : {false, true})
      compare_backends("gpt2 clip", p, op_threshold("fp32"),
                       std::string(accumulate ? "accumulated, " : "") +
                           "2 layers, C64, V97, grad_scale 4",
                       [&](Backend& be) { return clip_written(be, accumulate, p); });
}

TEST_CASE("cuda gpt2 clip_grad_norm after a backward pass: the half-precision gradient mirror is "
          "scaled with the fp32 part",
          "[cuda][gpt2]") {
  // The gradients a backward pass leaves, in fp16/bf16 runs partly in the
  // half mirror: each engine's clip checked against its own gradients
  // clipped on the host. Thresholds: fp32's 1e-9 in fp32 and tf32 (no
  // mirror: as the case above); in fp16 and bf16 the per-op ones, 1e-5 and
  // 1e-4: the mirror's part is rounded to its storage again after the
  // scaling (relative 2^-11 or 2^-8 at most, an NMSE below 2.4e-7 or 1.5e-5).
  // Then the clipped gradients, divided by the scale, against the CPU's with
  // the training-step case's chain thresholds (10x the per-op ones: the
  // gradients themselves differ that much). The loss scale is 4, but 256 in
  // fp16 (parity::kFp16LossScale, as the training-step case): small
  // activation gradients stay in fp16's normal range.
  for (const std::string& p : precisions()) {
    const float scale = p == "fp16" ? parity::kFp16LossScale : kClipGradScale;
    const double own = (p == "fp16" || p == "bf16") ? op_threshold(p) : op_threshold("fp32");
    compare_backends("gpt2 clip", p, op_threshold(p) * 10,
                     "2 layers, C64, V97, B2 T32, loss scale " + std::to_string(static_cast<int>(scale)),
                     [&](Backend& be) { return clip_after_backward(be, scale, own, p); });
  }
}
