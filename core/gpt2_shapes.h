// core/gpt2_shapes.h: the GPT-2 family's shapes (issue #25, model.arch =
// "gpt2"): the presets Hugging Face's GPT2LMHeadModel and OpenAI's release
// use, the rules a shape must keep, and the arithmetic the runner and the
// model share before any model is built: the parameter count (tied input and
// output embeddings, counted once, as transformers' num_parameters() does),
// the vocabulary padded for the GEMMs as llm.c pads it (inside the engine
// only: checkpoints keep the real vocabulary), and the FLOPs of one token's
// training step by the standard count (6 x parameters + the attention term,
// as the PaLM paper's appendix B and nanoGPT's estimate_mfu count it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace xrun {

struct Gpt2Shape {
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t width = 768;     // n_embd
  int64_t context = 1024;  // n_positions: the longest sequence
  int64_t vocab = 50257;
  constexpr int64_t head_size() const { return width / heads; }
};

// gpt2 (124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1558M);
// nullopt for another name.
inline std::optional<Gpt2Shape> gpt2_preset(const std::string& name) {
  if (name == "gpt2") return Gpt2Shape{12, 12, 768, 1024, 50257};
  if (name == "gpt2-medium") return Gpt2Shape{24, 16, 1024, 1024, 50257};
  if (name == "gpt2-large") return Gpt2Shape{36, 20, 1280, 1024, 50257};
  if (name == "gpt2-xl") return Gpt2Shape{48, 25, 1600, 1024, 50257};
  return std::nullopt;
}

// Why `s` cannot be built ("" when it can): every size at least 1, the
// width a multiple of the heads (each head gets width / heads).
inline std::string gpt2_shape_problem(const Gpt2Shape& s) {
  if (s.layers < 1 || s.heads < 1 || s.width < 1 || s.context < 1 || s.vocab < 1)
    return "layers, heads, width, context and vocab must each be at least 1";
  if (s.width % s.heads != 0)
    return "width " + std::to_string(s.width) + " is not a multiple of heads " +
           std::to_string(s.heads) + " (each head takes width / heads channels)";
  return "";
}

// The vocabulary rounded up to a multiple of 128 (50257 -> 50304, as
// llm.c's padded_vocab_size), for the output GEMM's sake.
constexpr int64_t gpt2_padded_vocab(int64_t vocab) { return (vocab + 127) / 128 * 128; }

// Parameters of one block: ln_1, attn.c_attn (width -> 3 width, with bias),
// attn.c_proj, ln_2, mlp.c_fc (width -> 4 width), mlp.c_proj.
constexpr int64_t gpt2_block_parameters(int64_t c) {
  return 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
}

// Every parameter, the tied embedding once: wte [vocab, width], wpe
// [context, width], the blocks, ln_f. gpt2: 124,439,808.
constexpr int64_t gpt2_parameters(const Gpt2Shape& s) {
  return s.vocab * s.width + s.context * s.width + s.layers * gpt2_block_parameters(s.width) +
         2 * s.width;
}

// FLOPs of one token's forward and backward pass at sequence length `tokens`
// (at most context): 6 N + 12 L H Q T, N the parameters without the
// position embedding (nanoGPT's get_num_params(non_embedding=True); the
// token embedding stays, as the output layer's weight), Q the head size:
// each weight's multiply-add twice in the backward pass, once forward, and
// the attention scores and their weighted sum over all T positions (the
// causal mask's saving not subtracted, as they count it).
constexpr double gpt2_flops_per_token(const Gpt2Shape& s, int64_t tokens) {
  const double n = static_cast<double>(gpt2_parameters(s) - s.context * s.width);
  return 6.0 * n + 12.0 * static_cast<double>(s.layers) * static_cast<double>(s.heads) *
                       static_cast<double>(s.head_size()) * static_cast<double>(tokens);
}

}  // namespace xrun
