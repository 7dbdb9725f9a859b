// tests/engine/reference_ops.cpp: the naive double-precision reference ops
// declared in reference_ops.h. Each function is the definition written out as
// loops, in canonical layouts, with no attempt at speed.
#include "reference_ops.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace xrun::ref {

// ------------------------------------------------------------ convolution --

Vec conv2d_forward(const ConvShape& sh, const Vec& x, const Vec& w) {
  const int64_t oh = sh.out_h(), ow = sh.out_w();
  Vec y(sh.n * sh.k * oh * ow, 0.0);
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t k = 0; k < sh.k; ++k)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = 0;
          for (int64_t c = 0; c < sh.c; ++c)
            for (int64_t r = 0; r < sh.r; ++r)
              for (int64_t s = 0; s < sh.s; ++s) {
                const int64_t iy = oy * sh.stride - sh.pad + r;
                const int64_t ix = ox * sh.stride - sh.pad + s;
                if (iy < 0 || iy >= sh.h || ix < 0 || ix >= sh.w) continue;
                acc += x[((n * sh.c + c) * sh.h + iy) * sh.w + ix] *
                       w[((k * sh.c + c) * sh.r + r) * sh.s + s];
              }
          y[((n * sh.k + k) * oh + oy) * ow + ox] = acc;
        }
  return y;
}

Vec conv2d_backward_data(const ConvShape& sh, const Vec& dy, const Vec& w) {
  const int64_t oh = sh.out_h(), ow = sh.out_w();
  Vec dx(sh.n * sh.c * sh.h * sh.w, 0.0);
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t k = 0; k < sh.k; ++k)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const double g = dy[((n * sh.k + k) * oh + oy) * ow + ox];
          for (int64_t c = 0; c < sh.c; ++c)
            for (int64_t r = 0; r < sh.r; ++r)
              for (int64_t s = 0; s < sh.s; ++s) {
                const int64_t iy = oy * sh.stride - sh.pad + r;
                const int64_t ix = ox * sh.stride - sh.pad + s;
                if (iy < 0 || iy >= sh.h || ix < 0 || ix >= sh.w) continue;
                dx[((n * sh.c + c) * sh.h + iy) * sh.w + ix] +=
                    g * w[((k * sh.c + c) * sh.r + r) * sh.s + s];
              }
        }
  return dx;
}

Vec conv2d_backward_weights(const ConvShape& sh, const Vec& x, const Vec& dy) {
  const int64_t oh = sh.out_h(), ow = sh.out_w();
  Vec dw(sh.k * sh.c * sh.r * sh.s, 0.0);
  for (int64_t n = 0; n < sh.n; ++n)
    for (int64_t k = 0; k < sh.k; ++k)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const double g = dy[((n * sh.k + k) * oh + oy) * ow + ox];
          for (int64_t c = 0; c < sh.c; ++c)
            for (int64_t r = 0; r < sh.r; ++r)
              for (int64_t s = 0; s < sh.s; ++s) {
                const int64_t iy = oy * sh.stride - sh.pad + r;
                const int64_t ix = ox * sh.stride - sh.pad + s;
                if (iy < 0 || iy >= sh.h || ix < 0 || ix >= sh.w) continue;
                dw[((k * sh.c + c) * sh.r + r) * sh.s + s] +=
                    g * x[((n * sh.c + c) * sh.h + iy) * sh.w + ix];
              }
        }
  return dw;
}

// ------------------------------------------------------------- batch norm --

namespace {
int64_t idx(const BnShape& sh, int64_t n, int64_t c, int64_t p) {
  return (n * sh.c + c) * sh.hw + p;
}

// y = act(pre) where pre = gamma * (x - mean) / sqrt(var + eps) + beta (+ residual).
void bn_apply(const BnShape& sh, const Vec& x, const Vec& gamma, const Vec& beta,
              const Vec& mean, const Vec& var, BnActivation act, const Vec* residual, Vec& pre,
              Vec& y) {
  if (act == BnActivation::add_relu && !residual)
    throw std::invalid_argument("reference batch norm: add_relu needs a residual");
  pre.assign(x.size(), 0.0);
  y.assign(x.size(), 0.0);
  for (int64_t c = 0; c < sh.c; ++c) {
    const double inv_std = 1.0 / std::sqrt(var[c] + kBnEps);
    for (int64_t n = 0; n < sh.n; ++n)
      for (int64_t p = 0; p < sh.hw; ++p) {
        const int64_t i = idx(sh, n, c, p);
        double v = gamma[c] * (x[i] - mean[c]) * inv_std + beta[c];
        if (act == BnActivation::add_relu) v += (*residual)[i];
        pre[i] = v;
        y[i] = act == BnActivation::none ? v : std::max(v, 0.0);
      }
  }
}
}  // namespace

BnTrainForward batch_norm_train_forward(const BnShape& sh, const Vec& x, const Vec& gamma,
                                        const Vec& beta, BnActivation act, const Vec* residual) {
  BnTrainForward f;
  f.mean.assign(sh.c, 0.0);
  f.var.assign(sh.c, 0.0);
  const double m = static_cast<double>(sh.count());
  for (int64_t c = 0; c < sh.c; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < sh.n; ++n)
      for (int64_t p = 0; p < sh.hw; ++p) sum += x[idx(sh, n, c, p)];
    const double mean = sum / m;
    double sq = 0;
    for (int64_t n = 0; n < sh.n; ++n)
      for (int64_t p = 0; p < sh.hw; ++p) {
        const double d = x[idx(sh, n, c, p)] - mean;
        sq += d * d;
      }
    f.mean[c] = mean;
    f.var[c] = sq / m;  // biased: what normalisation uses
  }
  bn_apply(sh, x, gamma, beta, f.mean, f.var, act, residual, f.pre_act, f.y);
  return f;
}

BnBackward batch_norm_backward(const BnShape& sh, const Vec& x, const Vec& gamma,
                               const BnTrainForward& fwd, const Vec& dy, BnActivation act) {
  BnBackward b;
  // Gradient at the ReLU's input (which is also the residual's gradient).
  Vec dpre = act == BnActivation::none ? dy : relu_backward(fwd.pre_act, dy);
  if (act == BnActivation::add_relu) b.dresidual = dpre;
  b.dx.assign(x.size(), 0.0);
  b.dgamma.assign(sh.c, 0.0);
  b.dbeta.assign(sh.c, 0.0);
  const double m = static_cast<double>(sh.count());
  for (int64_t c = 0; c < sh.c; ++c) {
    const double inv_std = 1.0 / std::sqrt(fwd.var[c] + kBnEps);
    // xhat = (x - mean) * inv_std; y = gamma xhat + beta.
    // dxhat = dpre * gamma; dx = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    double sum_dpre = 0, sum_dpre_xhat = 0;
    for (int64_t n = 0; n < sh.n; ++n)
      for (int64_t p = 0; p < sh.hw; ++p) {
        const int64_t i = idx(sh, n, c, p);
        const double xhat = (x[i] - fwd.mean[c]) * inv_std;
        sum_dpre += dpre[i];
        sum_dpre_xhat += dpre[i] * xhat;
      }
    b.dbeta[c] = sum_dpre;
    b.dgamma[c] = sum_dpre_xhat;
    for (int64_t n = 0; n < sh.n; ++n)
      for (int64_t p = 0; p < sh.hw; ++p) {
        const int64_t i = idx(sh, n, c, p);
        const double xhat = (x[i] - fwd.mean[c]) * inv_std;
        b.dx[i] = gamma[c] * inv_std *
                  (dpre[i] - sum_dpre / m - xhat * sum_dpre_xhat / m);
      }
  }
  return b;
}

void batch_norm_update_running(const BnShape& sh, const BnTrainForward& fwd, Vec& running_mean,
                               Vec& running_var) {
  const double m = static_cast<double>(sh.count());
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  for (int64_t c = 0; c < sh.c; ++c) {
    running_mean[c] = (1 - kBnMomentum) * running_mean[c] + kBnMomentum * fwd.mean[c];
    running_var[c] = (1 - kBnMomentum) * running_var[c] + kBnMomentum * fwd.var[c] * unbias;
  }
}

Vec batch_norm_infer_forward(const BnShape& sh, const Vec& x, const Vec& gamma, const Vec& beta,
                             const Vec& running_mean, const Vec& running_var, BnActivation act,
                             const Vec* residual) {
  Vec pre, y;
  bn_apply(sh, x, gamma, beta, running_mean, running_var, act, residual, pre, y);
  return y;
}

// ------------------------------------------------------------------- relu --

Vec relu_forward(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

Vec relu_backward(const Vec& x, const Vec& dy) {
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0 ? dy[i] : 0.0;
  return dx;
}

// ---------------------------------------------------------------- pooling --

MaxPoolForward max_pool_forward(int64_t n, int64_t c, int64_t h, int64_t w, const Vec& x,
                                int64_t kernel, int64_t stride, int64_t pad) {
  MaxPoolForward f;
  f.oh = (h + 2 * pad - kernel) / stride + 1;
  f.ow = (w + 2 * pad - kernel) / stride + 1;
  f.y.assign(n * c * f.oh * f.ow, 0.0);
  f.argmax.assign(f.y.size(), -1);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t oy = 0; oy < f.oh; ++oy)
        for (int64_t ox = 0; ox < f.ow; ++ox) {
          double best = -std::numeric_limits<double>::infinity();
          int64_t best_i = -1;
          for (int64_t r = 0; r < kernel; ++r)
            for (int64_t s = 0; s < kernel; ++s) {
              const int64_t iy = oy * stride - pad + r, ix = ox * stride - pad + s;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;  // padding never wins
              const int64_t i = ((b * c + ch) * h + iy) * w + ix;
              if (x[i] > best) best = x[i], best_i = i;
            }
          const int64_t o = ((b * c + ch) * f.oh + oy) * f.ow + ox;
          f.y[o] = best;
          f.argmax[o] = best_i;
        }
  return f;
}

Vec max_pool_backward(int64_t x_numel, const MaxPoolForward& fwd, const Vec& dy) {
  Vec dx(x_numel, 0.0);
  for (size_t o = 0; o < fwd.argmax.size(); ++o) dx[fwd.argmax[o]] += dy[o];
  return dx;
}

Vec global_avg_pool_forward(int64_t n, int64_t c, int64_t hw, const Vec& x) {
  Vec y(n * c, 0.0);
  for (int64_t i = 0; i < n * c; ++i) {
    double s = 0;
    for (int64_t p = 0; p < hw; ++p) s += x[i * hw + p];
    y[i] = s / static_cast<double>(hw);
  }
  return y;
}

Vec global_avg_pool_backward(int64_t n, int64_t c, int64_t hw, const Vec& dy) {
  Vec dx(n * c * hw);
  for (int64_t i = 0; i < n * c; ++i)
    for (int64_t p = 0; p < hw; ++p) dx[i * hw + p] = dy[i] / static_cast<double>(hw);
  return dx;
}

// ----------------------------------------------------------------- linear --

Vec linear_forward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

LinearBackward linear_backward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w,
                               const Vec& dy) {
  LinearBackward g;
  g.dx.assign(n * in, 0.0);
  g.dw.assign(out * in, 0.0);
  g.db.assign(out, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const double d = dy[r * out + o];
      g.db[o] += d;
      for (int64_t i = 0; i < in; ++i) {
        g.dx[r * in + i] += d * w[o * in + i];
        g.dw[o * in + i] += d * x[r * in + i];
      }
    }
  return g;
}

// ------------------------------------------------------------------- loss --

CrossEntropy softmax_cross_entropy(int64_t n, int64_t k, const Vec& logits,
                                   const std::vector<int32_t>& labels, int64_t valid,
                                   double grad_scale) {
  CrossEntropy ce;
  ce.dlogits.assign(n * k, 0.0);
  for (int64_t r = 0; r < valid; ++r) {
    const double* z = &logits[r * k];
    double mx = z[0];
    int64_t arg = 0;
    for (int64_t j = 1; j < k; ++j)
      if (z[j] > mx) mx = z[j], arg = j;
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(z[j] - mx);
    const double log_sum = mx + std::log(sum);
    ce.loss_sum += log_sum - z[labels[r]];
    ce.correct += arg == labels[r];
    for (int64_t j = 0; j < k; ++j) {
      const double p = std::exp(z[j] - log_sum);
      ce.dlogits[r * k + j] = (p - (j == labels[r] ? 1.0 : 0.0)) * grad_scale / valid;
    }
  }
  ce.loss_mean = valid > 0 ? ce.loss_sum / valid : 0.0;
  return ce;
}

// -------------------------------------------------------------- optimizer --

void adamw_step(const AdamW& o, int64_t step, Vec& param, const Vec& grad, Vec& exp_avg,
                Vec& exp_avg_sq) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  for (size_t i = 0; i < param.size(); ++i) {
    param[i] *= 1 - o.lr * o.weight_decay;
    exp_avg[i] = o.beta1 * exp_avg[i] + (1 - o.beta1) * grad[i];
    exp_avg_sq[i] = o.beta2 * exp_avg_sq[i] + (1 - o.beta2) * grad[i] * grad[i];
    const double denom = std::sqrt(exp_avg_sq[i]) / std::sqrt(bc2) + o.eps;
    param[i] -= o.lr / bc1 * exp_avg[i] / denom;
  }
}

void sgd_step(const Sgd& o, bool first, Vec& param, const Vec& grad, Vec& momentum_buffer) {
  for (size_t i = 0; i < param.size(); ++i) {
    double d = grad[i] + o.weight_decay * param[i];
    if (o.momentum != 0) {
      momentum_buffer[i] = first ? d : o.momentum * momentum_buffer[i] + d;
      d = o.nesterov ? d + o.momentum * momentum_buffer[i] : momentum_buffer[i];
    }
    param[i] -= o.lr * d;
  }
}

}  // namespace xrun::ref
