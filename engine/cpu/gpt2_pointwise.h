// engine/cpu/gpt2_pointwise.h: GPT-2's elementwise and gather kernels on the
// CPU (issue #25): the tanh form of GELU that GPT-2 uses (transformers'
// "gelu_new"), and the token + position embedding with its backward pass
// (a scatter-add into the token table, a sum over the batch into the
// position table).
#pragma once

#include <cstdint>

namespace xrun::cpu {

// y = x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), n values.
void gelu_tanh_forward(const float* x, int64_t n, float* y);
// dx = dy dy/dx of the above at x (written).
void gelu_tanh_backward(const float* x, const float* dy, int64_t n, float* dx);

// y [B*T, C]: row b T + t = wte[tokens[b T + t]] + wpe[t]. Every token must
// be below the table's rows (the data sources check it at open).
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t tokens_per_row, int64_t c, float* y);
// dwte[token] += dy row, dwpe[t] += dy rows at position t: added, not
// written (the tied output layer adds its own gradient into dwte), each
// channel's sums in row order (threads split the channels: no races, the
// same bits every run).
void embedding_backward(const int32_t* tokens, const float* dy, int64_t batch,
                        int64_t tokens_per_row, int64_t c, float* dwte, float* dwpe);

}  // namespace xrun::cpu
