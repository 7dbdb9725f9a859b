// engine/cpu/layer_norm.h: layer normalisation over each row of a plain
// [rows, C] tensor, as torch.nn.LayerNorm computes it (biased variance, eps
// inside the square root, an affine weight and bias per channel): the CPU
// kernels of GPT-2's layer norm op family (issue #25), xrun's own loops with
// each row's statistics and arithmetic in double, as engine/cpu/batchnorm.cpp
// sums for ResNet: no noisier than its float inputs allow, even for rows far
// from zero mean.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xrun::cpu {

// The epsilon of GPT-2's layer norms (transformers' layer_norm_epsilon).
constexpr double kLayerNormEps = 1e-5;

// y = (x - mean) * rstd * gamma + beta per row, rstd = 1 / sqrt(var + eps);
// each row's mean and rstd are written where `mean` and `rstd` are not null
// (float, for inspection and the tests: the backward pass recomputes them,
// so the op passes null).
void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t c, double eps, float* y, float* mean, float* rstd);

// From dy: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, xhat
// = (x - mean) rstd; dgamma = sum over rows of dy xhat, dbeta = sum of dy
// (written, not added; summed in double in a fixed order for a given
// thread count, so a run repeats itself bit for bit). Each row's mean and
// rstd are taken again from x in double (with kLayerNormEps), not from the
// forward pass's float copies.
// With add_to_dx, dx is added to instead (a residual stream's gradient).
// `partial` is room for the per-thread sums (layer_norm_scratch_values(c)
// doubles), or null to have the call make its own.
void layer_norm_backward(const float* dy, const float* x, const float* gamma, int64_t rows,
                         int64_t c, float* dx, float* dgamma, float* dbeta,
                         bool add_to_dx = false, double* partial = nullptr);
size_t layer_norm_scratch_values(int64_t c);

}  // namespace xrun::cpu
