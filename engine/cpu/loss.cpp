// engine/cpu/loss.cpp: softmax cross-entropy over plain [N, K] logits, mean
// over the valid rows, fused with its gradient: dlogits = (softmax - onehot)
// * grad_scale / valid. Computed in double per row for a stable log-sum-exp;
// rows as wide as a language model's vocabulary (kWideRow classes and more)
// in float with a vectorised exp (fast_exp.h) and one exp per element: the
// softmax is written into dlogits by the pass that sums it, then scaled.
// Loss sums, hits and rows add up until read_results() takes them.
#include <cmath>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/fast_exp.h"

namespace xrun::cpu {

namespace {

constexpr int64_t kWideRow = 1024;

// One wide row: its loss term (written to *loss), whether the label is the
// row's largest logit, and (when drow is not null) its gradient.
XRUN_VECTOR_CLONES
void wide_row(const float* row, int64_t k, int32_t label, double scale, float* drow, double* loss,
              bool* hit) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < k; ++j) mx = row[j] > mx ? row[j] : mx;
  // The exps summed in float over runs of 512 (vectorised: each lane adds
  // 32), the runs' sums in double.
  constexpr int64_t kRun = 512;
  double sum = 0;
  for (int64_t j0 = 0; j0 < k; j0 += kRun) {
    const int64_t j1 = j0 + kRun < k ? j0 + kRun : k;
    float part = 0;
    if (drow) {
#pragma omp simd reduction(+ : part)
      for (int64_t j = j0; j < j1; ++j) {
        const float e = exp_vectorizable(row[j] - mx);
        drow[j] = e;
        part += e;
      }
    } else {
#pragma omp simd reduction(+ : part)
      for (int64_t j = j0; j < j1; ++j) part += exp_vectorizable(row[j] - mx);
    }
    sum += part;
  }
  if (drow) {
    const auto f = static_cast<float>(scale / sum);
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) drow[j] *= f;
    drow[label] -= static_cast<float>(scale);
  }
  *loss = static_cast<double>(mx) + std::log(sum) - row[label];
  // Top-1 as the narrow rows count it: the first largest logit (the scan
  // before the label only where the label's logit is a largest one).
  bool first = row[label] == mx;
  for (int64_t j = 0; j < label && first; ++j) first = row[j] < mx;
  *hit = first;
}

class CpuLoss final : public LossOp {
 public:
  CpuLoss(CpuTensor* logits, CpuTensor* dlogits, CpuTensor* labels_tensor)
      : logits_(logits), dlogits_(dlogits) {
    if (!is_plain(logits->md) || !is_plain(dlogits->md) || logits->dims.size() != 2)
      throw std::logic_error("softmax cross-entropy needs plain [N, K] logits");
    labels = labels_tensor;
  }

  using LossOp::forward_backward;
  void set_grad_scale(float grad_scale) override { grad_scale_ = grad_scale; }
  void forward_backward(int valid_rows) override { run(valid_rows, true, grad_scale_); }
  void forward(int valid_rows) override { run(valid_rows, false, 0.0f); }
  Results read_results() override {
    const Results r = results_;
    results_ = {};
    return r;
  }

 private:
  void run(int valid, bool backward, float grad_scale) {
    const int64_t n = logits_->dims[0], k = logits_->dims[1];
    if (valid < 0 || valid > n) throw std::invalid_argument("loss: valid rows out of range");
    const float* z = static_cast<const float*>(logits_->data);
    float* dz = static_cast<float*>(dlogits_->data);
    const int32_t* y = static_cast<const int32_t*>(labels->data);
    double loss_sum = 0;
    int64_t correct = 0;
    const double scale = valid > 0 ? grad_scale / static_cast<double>(valid) : 0.0;
    bool bad_label = false;
#pragma omp parallel for reduction(+ : loss_sum, correct) reduction(|| : bad_label)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = z + i * k;
      float* drow = dz + i * k;
      if (i >= valid) {
        if (backward)
          for (int64_t j = 0; j < k; ++j) drow[j] = 0.0f;
        continue;
      }
      const int32_t label = y[i];
      if (label < 0 || label >= k) {
        bad_label = true;
        continue;
      }
      if (k >= kWideRow) {
        double term = 0;
        bool hit = false;
        wide_row(row, k, label, scale, backward ? drow : nullptr, &term, &hit);
        loss_sum += term;
        correct += hit;
        continue;
      }
      int64_t argmax = 0;
      double mx = row[0];
      for (int64_t j = 1; j < k; ++j)
        if (row[j] > mx) mx = row[j], argmax = j;
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += std::exp(row[j] - mx);
      const double lse = mx + std::log(sum);
      loss_sum += lse - row[label];
      correct += argmax == label;
      if (backward) {
        for (int64_t j = 0; j < k; ++j) {
          const double p = std::exp(row[j] - lse);
          drow[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale);
        }
      }
    }
    if (bad_label) throw std::runtime_error("loss: a label is outside [0, num_classes)");
    results_.loss_sum += loss_sum;
    results_.correct += correct;
    results_.rows += valid;
  }

  CpuTensor* logits_;
  CpuTensor* dlogits_;
  float grad_scale_ = 1.0f;
  Results results_;
};

}  // namespace

std::unique_ptr<LossOp> make_softmax_cross_entropy(CpuBackend& be, CpuTensor* logits,
                                                   CpuTensor* dlogits, CpuTensor* labels) {
  return std::make_unique<CpuLoss>(logits, dlogits, labels);
}

}  // namespace xrun::cpu
