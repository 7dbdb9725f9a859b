// tests/engine/reference_ops.h: a naive reference for every op family of the
// Backend interface, for testing the CPU backend (and, through it, the CUDA
// one). Plain loops in double precision over canonical layouts (NCHW
// activations, OIHW weights, [N, C] pooled / linear tensors), written from the
// textbook / PyTorch definitions and sharing no code with the engine. Meant
// for tiny shapes only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace xrun::ref {

using Vec = std::vector<double>;

// ------------------------------------------------------------ convolution --
// No bias; `shape` uses the engine's ConvShape (input n,c,h,w; k outputs,
// r x s kernel, one stride and one padding for both spatial dims).
Vec conv2d_forward(const ConvShape& sh, const Vec& x, const Vec& w);          // -> y [n,k,oh,ow]
Vec conv2d_backward_data(const ConvShape& sh, const Vec& dy, const Vec& w);   // -> dx [n,c,h,w]
Vec conv2d_backward_weights(const ConvShape& sh, const Vec& x, const Vec& dy);  // -> dw [k,c,r,s]

// ------------------------------------------------------------- batch norm --
// x is [n, c, hw] (NCHW flattened). Training forward normalises with the
// batch mean and the biased batch variance; `act` is applied to
// gamma * xhat + beta (+ residual for add_relu).
struct BnShape {
  int64_t n = 1, c = 1, hw = 1;
  int64_t count() const { return n * hw; }  // values per channel
};
constexpr double kBnEps = 1e-5;
constexpr double kBnMomentum = 0.1;

struct BnTrainForward {
  Vec y;            // output after the activation
  Vec pre_act;      // gamma * xhat + beta (+ residual): what the ReLU sees
  Vec mean, var;    // batch mean, biased batch variance (per channel)
};
BnTrainForward batch_norm_train_forward(const BnShape& sh, const Vec& x, const Vec& gamma,
                                        const Vec& beta, BnActivation act,
                                        const Vec* residual = nullptr);
struct BnBackward {
  Vec dx, dgamma, dbeta;
  Vec dresidual;  // add_relu only
};
// dy is the gradient of the op's output y; the forward result gives the
// batch statistics and the ReLU's input.
BnBackward batch_norm_backward(const BnShape& sh, const Vec& x, const Vec& gamma,
                               const BnTrainForward& fwd, const Vec& dy, BnActivation act);
// PyTorch's running statistics update from one training batch: momentum 0.1,
// running_var from the UNBIASED batch variance (var * count / (count - 1)).
void batch_norm_update_running(const BnShape& sh, const BnTrainForward& fwd, Vec& running_mean,
                               Vec& running_var);
// Inference: normalise with the running statistics.
Vec batch_norm_infer_forward(const BnShape& sh, const Vec& x, const Vec& gamma, const Vec& beta,
                             const Vec& running_mean, const Vec& running_var, BnActivation act,
                             const Vec* residual = nullptr);

// ------------------------------------------------------------------- relu --
Vec relu_forward(const Vec& x);
Vec relu_backward(const Vec& x, const Vec& dy);  // dy where x > 0, else 0

// ---------------------------------------------------------------- pooling --
// Max pooling; padded positions never win (they are -infinity). Ties go to
// the first maximum in row-major window order.
struct MaxPoolForward {
  Vec y;
  std::vector<int64_t> argmax;  // flat NCHW index into x per output element
  int64_t oh = 0, ow = 0;
};
MaxPoolForward max_pool_forward(int64_t n, int64_t c, int64_t h, int64_t w, const Vec& x,
                                int64_t kernel, int64_t stride, int64_t pad);
Vec max_pool_backward(int64_t x_numel, const MaxPoolForward& fwd, const Vec& dy);
// Global average pooling: x [n,c,h,w] -> [n,c] and back.
Vec global_avg_pool_forward(int64_t n, int64_t c, int64_t hw, const Vec& x);
Vec global_avg_pool_backward(int64_t n, int64_t c, int64_t hw, const Vec& dy);

// ----------------------------------------------------------------- linear --
// y[n, o] = sum_i x[n, i] w[o, i] + b[o]
Vec linear_forward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w, const Vec& b);
struct LinearBackward {
  Vec dx, dw, db;
};
LinearBackward linear_backward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w,
                               const Vec& dy);

// ------------------------------------------------------------------- loss --
// Softmax cross-entropy over the first `valid` rows of [n, k] logits: loss is
// the mean of -log softmax(z)[label] over those rows; dlogits = (softmax -
// onehot) * grad_scale / valid on valid rows and 0 on the others.
struct CrossEntropy {
  double loss_sum = 0;   // sum over valid rows
  double loss_mean = 0;  // loss_sum / valid
  int64_t correct = 0;   // valid rows whose largest logit is the label's
  Vec dlogits;
};
CrossEntropy softmax_cross_entropy(int64_t n, int64_t k, const Vec& logits,
                                   const std::vector<int32_t>& labels, int64_t valid,
                                   double grad_scale);

// -------------------------------------------------------------- optimizer --
// torch.optim.AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). `step` is 1-based.
struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
void adamw_step(const AdamW& o, int64_t step, Vec& param, const Vec& grad, Vec& exp_avg,
                Vec& exp_avg_sq);
// torch.optim.SGD (dampening 0): d = g + wd p; with momentum, buf = d on the
// first step, else buf = momentum buf + d; d = nesterov ? d + momentum buf : buf;
// p -= lr d. `first` says whether this is the buffer's first step.
struct Sgd {
  double lr = 0.1, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};
void sgd_step(const Sgd& o, bool first, Vec& param, const Vec& grad, Vec& momentum_buffer);

}  // namespace xrun::ref
