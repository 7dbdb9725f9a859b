// engine/cpu/optimizer.cpp: AdamW and SGD with PyTorch's semantics, applied in
// one pass over the flat parameter region (every parameter, gradient and
// state value sits at the same offset in its region, so the update is one
// vectorised loop whatever the layouts). Also gradient accumulation.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

class CpuOptimizer final : public OptimizerOp {
 public:
  CpuOptimizer(CpuBackend& be, const OptimizerSettings& s, bool accumulation)
      : be_(be), s_(s), accumulation_(accumulation) {
    if (s.name != "adamw" && s.name != "sgd")
      throw std::invalid_argument("unknown optimizer '" + s.name + "'");
  }

  std::vector<std::string> state_names() const override {
    if (s_.name == "adamw") return {"exp_avg", "exp_avg_sq"};
    if (s_.momentum != 0) return {"momentum_buffer"};
    return {};
  }

  void step(const OptimizerStep& st) override {
    float* p = be_.region(TensorRole::parameter);
    const float* g = be_.region(TensorRole::gradient);
    const int64_t n = count();
    const float inv_scale = 1.0f / st.grad_scale;
    const float lr = static_cast<float>(st.lr);
    const float wd = static_cast<float>(s_.weight_decay);
    if (s_.name == "adamw") {
      float* m = state(0);
      float* v = state(1);
      const float b1 = static_cast<float>(s_.beta1), b2 = static_cast<float>(s_.beta2);
      const float eps = static_cast<float>(s_.eps);
      const double bc1 = 1.0 - std::pow(s_.beta1, static_cast<double>(st.step));
      const double bc2 = 1.0 - std::pow(s_.beta2, static_cast<double>(st.step));
      const float step_size = static_cast<float>(st.lr / bc1);
      const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      const float decay = 1.0f - lr * wd;
#pragma omp parallel for simd
      for (int64_t i = 0; i < n; ++i) {
        const float grad = g[i] * inv_scale;
        p[i] *= decay;
        m[i] += (grad - m[i]) * (1.0f - b1);
        v[i] = v[i] * b2 + (1.0f - b2) * grad * grad;
        const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
      }
    } else {
      const float mom = static_cast<float>(s_.momentum);
      const bool nesterov = s_.nesterov;
      if (mom == 0.0f) {
#pragma omp parallel for simd
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] * inv_scale + wd * p[i]);
      } else {
        float* buf = state(0);
        const bool first = st.step <= 1 && !momentum_started_;
#pragma omp parallel for simd
        for (int64_t i = 0; i < n; ++i) {
          const float d = g[i] * inv_scale + wd * p[i];
          buf[i] = first ? d : buf[i] * mom + d;
          p[i] -= lr * (nesterov ? d + mom * buf[i] : buf[i]);
        }
        momentum_started_ = true;
      }
    }
  }

  void zero_grad() override {
    std::memset(be_.region(TensorRole::gradient), 0, be_.region_bytes(TensorRole::gradient));
  }

  void accumulate_begin() override {
    need_accumulation();
    std::memcpy(acc(), be_.region(TensorRole::gradient), bytes());
  }
  void accumulate_add() override {
    need_accumulation();
    float* a = acc();
    const float* g = be_.region(TensorRole::gradient);
    const int64_t n = count();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) a[i] += g[i];
  }
  void accumulate_end() override {
    need_accumulation();
    std::memcpy(be_.region(TensorRole::gradient), acc(), bytes());
  }

  void read_state(int which, const Tensor* param, std::span<float> canonical) override {
    CpuTensor v = view(which, param);
    be_.read(&v, canonical);
  }
  void write_state(int which, const Tensor* param, std::span<const float> canonical) override {
    CpuTensor v = view(which, param);
    be_.write(&v, canonical);
    if (s_.name == "sgd") momentum_started_ = true;
  }

 private:
  size_t bytes() const { return be_.region_bytes(TensorRole::parameter); }
  int64_t count() const { return static_cast<int64_t>(bytes() / sizeof(float)); }
  float* state(int which) { return be_.mirror_region(state_names().at(which)); }
  float* acc() { return be_.mirror_region("grad_accum"); }
  void need_accumulation() const {
    if (!accumulation_) throw std::logic_error("optimizer made without accumulation");
  }
  // A tensor with the parameter's layout over the state region at its offset.
  CpuTensor view(int which, const Tensor* param) {
    if (param->role != TensorRole::parameter)
      throw std::invalid_argument(param->name + " is not a parameter");
    const CpuTensor* p = as_cpu(param);
    CpuTensor v;
    v.name = p->name + "." + state_names().at(which);
    v.dims = p->dims;
    v.md = p->md;
    v.bytes = p->bytes;
    v.data = reinterpret_cast<char*>(state(which)) + p->offset;
    v.mem = dnnl::memory(v.md, be_.engine(), v.data);
    return v;
  }

  CpuBackend& be_;
  OptimizerSettings s_;
  bool accumulation_;
  bool momentum_started_ = false;
};

}  // namespace

std::unique_ptr<OptimizerOp> make_optimizer(CpuBackend& be, const OptimizerSettings& settings,
                                            bool accumulation) {
  return std::make_unique<CpuOptimizer>(be, settings, accumulation);
}

}  // namespace xrun::cpu
