// engine/cuda/kernels.h: xrun's own CUDA kernels, as host-callable launchers
// (the kernels themselves are in layout.cu, pointwise.cu, loss.cu and
// optimizer.cu). Activations are NHWC in the run's activation type (fp32,
// fp16 or bf16); parameters, gradients and optimizer state are fp32 in flat
// regions; the fp16/bf16 copies of the weights sit in a mirror region at the
// same element offsets. Every launcher queues work on `stream` and returns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xrun::cuda {

enum class DataType : uint8_t { f32, f16, bf16 };
size_t element_size(DataType t);

// ---- layouts (layout.cu) --------------------------------------------------
// Canonical fp32 NCHW (or OIHW) <-> the device layout NHWC (or KRSC) in
// `dt`, with the channel dimension padded to c_pad (padding written as 0).
void nchw_to_nhwc(const float* src, void* dst, DataType dt, int64_t n, int64_t c, int64_t h,
                  int64_t w, int64_t c_pad, cudaStream_t stream);
void nhwc_to_nchw(const void* src, DataType dt, float* dst, int64_t n, int64_t c, int64_t h,
                  int64_t w, int64_t c_pad, cudaStream_t stream);
// Plain element-wise conversions.
void cast_from_float(const float* src, void* dst, DataType dt, int64_t count,
                     cudaStream_t stream);
void cast_to_float(const void* src, DataType dt, float* dst, int64_t count, cudaStream_t stream);

// uint8 NCHW images -> normalised NHWC activations: x = pixel * scale[c] +
// shift[c]; rows >= count and channels >= c are zero.
struct Normalisation {
  float scale[16];
  float shift[16];
};
// With `draws` (per sample crop_y, crop_x, flip), each sample is cropped
// from its zero-padded (`pad` pixels) self and flipped as data::augment_sample
// does, in the same pass.
struct Augmentation {
  const int32_t* draws = nullptr;  // device memory, 3 per sample; nullptr = none
  bool random_crop = false;
  bool hflip = false;
  int pad = 4;
};
void normalize_images(const uint8_t* images, void* dst, DataType dt, int64_t n, int64_t count,
                      int64_t c, int64_t h, int64_t w, int64_t c_pad, const Normalisation& norm,
                      const Augmentation& augment, cudaStream_t stream);

// ---- pointwise (pointwise.cu) ---------------------------------------------
void add_inplace(void* dst, const void* src, DataType dt, int64_t count, cudaStream_t stream);
void relu_inplace(void* y, DataType dt, int64_t count, cudaStream_t stream);
// y = max(y + residual, 0)
void add_relu_inplace(void* y, const void* residual, DataType dt, int64_t count,
                      cudaStream_t stream);
// dx = dy where y > 0, else 0
void relu_backward(const void* y, const void* dy, void* dx, DataType dt, int64_t count,
                   cudaStream_t stream);
// y[r, :] += bias (bias fp32)
void add_bias(void* y, DataType dt, const float* bias, int64_t rows, int64_t cols,
              cudaStream_t stream);
// db[c] = sum_r dy[r, c] (into fp32, overwriting): 32 columns a block, the
// rows split over 8 warps and summed in a fixed order (deterministic). With
// `partials` (column_chunks(rows) x cols floats of device scratch) the rows
// are cut into chunks summed by blocks of their own, then the chunks in
// order: many blocks where rows are many and columns few (GPT-2's biases).
void bias_grad(const void* dy, DataType dt, float* db, int64_t rows, int64_t cols,
               float* partials, cudaStream_t stream);
// The row chunks of a chunked column sum: rows / 512, within [1, 64].
int64_t column_chunks(int64_t rows);
// Global average pooling over H*W of NHWC x -> [N, C]; and its backward.
void global_avg_pool(const void* x, void* y, DataType dt, int64_t n, int64_t hw, int64_t c,
                     cudaStream_t stream);
void global_avg_pool_backward(const void* dy, void* dx, DataType dt, int64_t n, int64_t hw,
                              int64_t c, cudaStream_t stream);

// ---- GPT-2 (layer_norm.cu, attention.cu, gpt2_pointwise.cu) ----------------
// Plain row-major [rows, C] activations in `dt`; parameters fp32.

// torch.nn.LayerNorm per row: y = (x - mean) rstd gamma + beta, one warp a
// row, the statistics in fp32 in two passes; mean and rstd [rows] kept for
// the backward pass.
void layer_norm_forward(const void* x, DataType dt, const float* gamma, const float* beta,
                        int64_t rows, int64_t c, float eps, void* y, float* mean, float* rstd,
                        cudaStream_t stream);
// dx written (or added to, with add_to_dx); dgamma and dbeta written, summed
// over the rows in a fixed order: in chunks of rows where `partials` is
// given (2 x column_chunks(rows) x c floats of device scratch).
void layer_norm_backward(const void* dy, const void* x, DataType dt, const float* gamma,
                         const float* mean, const float* rstd, int64_t rows, int64_t c,
                         void* dx, bool add_to_dx, float* dgamma, float* dbeta,
                         float* partials, cudaStream_t stream);

// Causal self-attention pieces around cuBLAS's batched GEMMs (attention.cu).
// qkv [B, T, 3C] (q, k, v, each H heads of hs = C / H) <-> q, k, v
// [B, H, T, hs] each (`dst`, 3 B T C values); backward: the reverse.
void split_heads(const void* qkv, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                 void* q, void* k, void* v, cudaStream_t stream);
void merge_head_grads(const void* dq, const void* dk, const void* dv, DataType dt, int64_t b,
                      int64_t t, int64_t h, int64_t hs, void* dqkv, cudaStream_t stream);
// [B, H, T, hs] <-> [B, T, C].
void heads_to_rows(const void* src, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                   void* dst, cudaStream_t stream);
void rows_to_heads(const void* src, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                   void* dst, cudaStream_t stream);
// In place over `blocks` [T, T] score blocks (already scaled): row t becomes
// softmax over u <= t, zero beyond.
void causal_softmax(void* att, DataType dt, int64_t blocks, int64_t t, cudaStream_t stream);
// dp := p (dp - sum_u p dp) row by row (u <= t), zero beyond: the scores'
// gradient, in place.
void causal_softmax_backward(const void* p, void* dp, DataType dt, int64_t blocks, int64_t t,
                             cudaStream_t stream);

// GELU, tanh form, in fp32 arithmetic (gpt2_pointwise.cu).
void gelu_forward(const void* x, void* y, DataType dt, int64_t count, cudaStream_t stream);
void gelu_backward(const void* x, const void* dy, void* dx, DataType dt, int64_t count,
                   cudaStream_t stream);
// y = a + b.
void add(const void* a, const void* b, void* y, DataType dt, int64_t count, cudaStream_t stream);
// y[r] = wte[tokens[r]] + wpe[r % t] (fp32 tables; a token outside [0,
// vocab) reads a zero row).
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t rows,
                       int64_t t, int64_t c, int64_t vocab, void* y, DataType dt,
                       cudaStream_t stream);
// dwpe[p] = sum over the batch rows at position p (written, in order);
// dwte[tokens[r]] += dy[r] (fp32 atomics: the order of the adds, and so
// the last bits, may differ between runs where a token repeats).
void embedding_backward(const int32_t* tokens, const void* dy, DataType dt, int64_t rows,
                        int64_t t, int64_t c, int64_t vocab, float* dwte, float* dwpe,
                        cudaStream_t stream);

// ---- loss (loss.cu) ---------------------------------------------------------
// Sums kept on the device between reads, so no step has to wait for the host.
struct LossTotals {
  double loss_sum;
  unsigned long long correct;
  unsigned long long rows;
  unsigned int bad_label;
};
// Softmax cross-entropy over [rows, classes] logits stored `ld` to a row
// (ld >= classes: GPT-2's padded vocabulary); rows >= valid are ignored
// (and get zero gradient, as do a bad label's row and the columns from
// classes to ld). With backward, dlogits = (softmax - onehot) *
// *grad_scale / valid (grad_scale in device memory).
void softmax_cross_entropy(const void* logits, void* dlogits, DataType dt, const int32_t* labels,
                           int64_t rows, int64_t valid, int64_t classes, int64_t ld,
                           const float* grad_scale, bool backward, LossTotals* totals,
                           cudaStream_t stream);

// ---- optimizer (optimizer.cu) -------------------------------------------------
// Gradients of a parameter arrive in one of two regions: fp32 (batch norm,
// biases) or the half-precision mirror (convolution and fc weights in
// fp16/bf16 runs); the other region holds zero there. Kernels read g =
// g32[i] + g16[i] (g16 may be null).
struct GradientSource {
  const float* g32 = nullptr;
  const void* g16 = nullptr;  // DataType half_type
  DataType half_type = DataType::f16;
};
// found_inf := 1 if any gradient is inf or NaN (left untouched otherwise).
void check_finite(const GradientSource& g, int64_t count, int* found_inf, cudaStream_t stream);

// The per-step values, read by the kernels from device memory (so a CUDA
// graph recorded once sees each step's values). Gradients are multiplied by
// inv_scale first (loss scaling).
struct AdamWArgs {
  float lr, weight_decay, beta1, beta2, eps, step_size, bc2_sqrt, inv_scale;
};
struct SgdArgs {
  float lr, weight_decay, momentum, inv_scale;
  int nesterov, first;
};
// Updates fp32 master weights (and writes the half copy `p16` when given).
// When found_inf is non-null and set, the step changes nothing.
void adamw_step(float* p, void* p16, DataType half_type, const GradientSource& g, float* m,
                float* v, int64_t count, const AdamWArgs* args, const int* found_inf,
                cudaStream_t stream);
void sgd_step(float* p, void* p16, DataType half_type, const GradientSource& g, float* buf,
              int64_t count, const SgdArgs* args, const int* found_inf, cudaStream_t stream);
// acc = g (first) or acc += g, with g = g32 + g16 as above (inv_scale 1).
void accumulate_gradients(float* acc, const GradientSource& g, int64_t count, bool first,
                          cudaStream_t stream);

// torch.nn.utils.clip_grad_norm_'s rule on g = g32 + g16 (either may be
// null): the L2 norm of g inv_scale (in double, summed in a fixed order
// through `partials`, kClipBlocks + 1 doubles of device memory) and, where it is
// above `limit`, both parts scaled by limit / (norm + 1e-6). No host
// synchronisation.
constexpr int kClipBlocks = 512;
void clip_grad_norm(float* g32, void* g16, DataType half_type, int64_t count, float inv_scale,
                    double limit, double* partials, cudaStream_t stream);

}  // namespace xrun::cuda
