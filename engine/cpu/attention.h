// engine/cpu/attention.h: GPT-2's causal self-attention on the CPU (issue
// #25), as transformers' GPT2Attention computes it with dropout 0: from the
// fused projection qkv [B*T, 3C] (q, k, v side by side, head h in columns
// [h hs, (h + 1) hs) of each, hs = C / H), per batch row and head
//   scores = q k^T / sqrt(hs), position t seeing positions <= t only,
//   p = softmax(scores), y = p v,
// the heads side by side again in y [B*T, C]. The probabilities p [B, H, T,
// T] may be kept for the backward pass, or recomputed there (at gpt2's T =
// 1024, 4 MB per batch row and head: 200 MB a layer at batch 4).
// xrun's own loops, each dot product and softmax row in double, the (batch
// row, head) pairs in parallel.
#pragma once

#include <cstdint>

namespace xrun::cpu {

struct AttentionShape {
  int64_t batch = 1, tokens = 1, heads = 1, width = 1;  // B, T, H, C
  int64_t head_size() const { return width / heads; }
};

// y [B*T, C] and, where p is not null, p [B, H, T, T] (the masked entries
// written as 0) from qkv.
void causal_attention_forward(const AttentionShape& s, const float* qkv, float* y, float* p);

// dqkv [B*T, 3C] (written) from dy [B*T, C], qkv and the forward pass's p,
// or with p null each row of p recomputed from qkv (in double: no [T, T]
// block kept between the passes, for a second pass of score products):
// dv = p^T dy, dp = dy v^T, dscores = p (dp - sum_j p dp), dq = dscores k /
// sqrt(hs), dk = dscores^T q / sqrt(hs).
void causal_attention_backward(const AttentionShape& s, const float* qkv, const float* p,
                               const float* dy, float* dqkv);

}  // namespace xrun::cpu
