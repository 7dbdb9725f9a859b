// engine/model/gpt2_costs.h: GPT-2's floating-point work and least memory
// traffic per layer and pass of one micro-batch, for the roofline
// (runner/roofline.h) as step_flops.h and step_bytes.h count ResNet's. The
// layers are what profile.layers times in engine/model/gpt2.cpp:
// "transformer.wte" (the token + position embedding), each block
// "transformer.h.N", "transformer.ln_f", "lm_head", then "loss"; passes
// "forward" and "backward". R = batch x T rows, C the width, V the
// vocabulary, a multiply-add 2 FLOPs:
//
//   GEMM        forward 2 R in out (+ R out for a bias); backward twice that
//               (dx and dW; + R out for the bias gradient); bytes: forward
//               x + W + y, backward dy + W + dx + x + dy + dW
//   attention   the scores and the weighted sum, 2 B H T T hs each (the whole
//               T x T block, as 6N + 12LHQT counts it), the softmax 5 per
//               score; backward four such products and 4 per score; bytes:
//               qkv + y + the kept probabilities, backward those + the
//               gradients
//   layer norm  8 per element forward, 9 backward (+1 where dx is added to)
//   GELU        9 per element forward, 14 backward
//   residual    1 per element forward; backward copies (0 FLOPs)
//   embedding   1 per element forward, 2 backward (the two tables' sums)
//   loss        4 per logit forward, 3 backward
//
// Tensors at `element_bytes` per element (4 fp32/tf32, 2 fp16/bf16);
// parameters counted at 4 (fp32 masters) where a pass reads them for a
// non-GEMM op. Evaluation, the optimizer and data loading are not counted.
#pragma once

#include <vector>

#include "core/gpt2_shapes.h"
#include "core/records.h"

namespace xrun {

std::vector<LayerCostRecord> gpt2_layer_costs(const Gpt2Shape& shape, int64_t batch,
                                              int64_t tokens, int element_bytes);

}  // namespace xrun
