// engine/cpu/optimizer.cpp: AdamW and SGD with PyTorch's semantics, applied in
// one pass over the flat parameter region (every parameter, gradient and
// state value sits at the same offset in its region, so the update is one
// vectorised loop whatever the layouts), or over one layer's parameters at a
// time during the backward pass (apply_to): the same kernel on a sub-range,
// so the same operations per element. Parameters left out of the weight
// decay (exclude_from_decay) split the pass into pieces. Where the backend
// keeps a bf16 copy of the parameters (GPT-2's bf16 GEMMs), AdamW writes it
// in the same pass. Also gradient accumulation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

struct AdamWStep {
  float inv_scale, decay, b1, b2, eps, step_size, bc2_sqrt;
};

// Below this many elements (one BN layer's parameters) the update runs on
// the calling thread: starting a parallel region costs more than the loop.
constexpr int64_t kParallelMin = 1 << 14;

// One element's update; returns p's new value.
[[gnu::always_inline]] inline float adamw_element(float& p, float g, float& m, float& v,
                                                 const AdamWStep& a) {
  const float grad = g * a.inv_scale;
  p *= a.decay;
  m += (grad - m) * (1.0f - a.b1);
  v = v * a.b2 + (1.0f - a.b2) * grad * grad;
  const float denom = std::sqrt(v) / a.bc2_sqrt + a.eps;
  p -= a.step_size * m / denom;
  return p;
}

// p's new values are also rounded into p_bf16 (the backend's bf16 copy of
// the parameters) where given: in the same pass, no second read of p. (The
// loops sit in the cloned function itself: OpenMP outlines a parallel loop
// before inlining, so a loop in a helper would run the helper's default ISA.)
XRUN_VECTOR_CLONES
void adamw_kernel(float* p, const float* g, float* m, float* v, bf16_t* p_bf16, int64_t n,
                  AdamWStep a) {
  if (p_bf16) {
#pragma omp parallel for simd if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p_bf16[i] = float_to_bf16(adamw_element(p[i], g[i], m[i], v[i], a));
  } else {
#pragma omp parallel for simd if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) adamw_element(p[i], g[i], m[i], v[i], a);
  }
}

// buf == nullptr: no momentum. first: the momentum buffer starts as d.
XRUN_VECTOR_CLONES
void sgd_kernel(float* p, const float* g, float* buf, int64_t n, float inv_scale, float lr,
                float wd, float mom, bool nesterov, bool first) {
  if (!buf) {
#pragma omp parallel for simd if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] * inv_scale + wd * p[i]);
    return;
  }
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] * inv_scale + wd * p[i];
    buf[i] = first ? d : buf[i] * mom + d;
    p[i] -= lr * (nesterov ? d + mom * buf[i] : buf[i]);
  }
}

class CpuOptimizer final : public OptimizerOp {
 public:
  CpuOptimizer(CpuBackend& be, const OptimizerSettings& s, bool accumulation)
      : be_(be), s_(s), accumulation_(accumulation) {
    optimizer_state_names(s);  // refuses an unknown optimizer
    for (const std::string& state : state_names()) be.declare_mirror(state);
    if (accumulation) be.declare_mirror("grad_accum");
  }

  std::vector<std::string> state_names() const override { return optimizer_state_names(s_); }

  bool found_inf() override { return found_inf_; }

  void set_step(const OptimizerStep& st) override {
    st_ = st;
    end_of_step();  // a step done layer by layer is complete when the next begins
  }

  void apply() override {
    const float* g = be_.region(TensorRole::gradient);
    const int64_t n = count();
    found_inf_ = false;
    if (st_.check_finite) {
      bool bad = false;
#pragma omp parallel for reduction(|| : bad)
      for (int64_t i = 0; i < n; ++i) bad = bad || !std::isfinite(g[i]);
      found_inf_ = bad;
      if (bad) return;
    }
    update(0, n);
    be_.weights_changed();
    // AdamW rounded every parameter into the backend's bf16 copy as it went.
    if (be_.bf16_weights() && s_.name == "adamw") be_.bf16_weights_written();
    end_of_step();
  }

  bool per_layer() const override { return true; }

  void apply_to(std::span<Tensor* const> params) override {
    if (st_.check_finite)
      throw std::logic_error("a layer-by-layer update cannot skip a step on inf/NaN gradients");
    for (Tensor* t : params) {
      const CpuTensor* p = as_cpu(t);
      if (p->role != TensorRole::parameter)
        throw std::invalid_argument(p->name + " is not a parameter");
      update(static_cast<int64_t>(p->offset / sizeof(float)),
             static_cast<int64_t>(p->bytes / sizeof(float)));
    }
    be_.weights_changed();
  }

  void exclude_from_decay(std::span<Tensor* const> params) override {
    const auto ranges = parameter_ranges(params);
    no_decay_.insert(no_decay_.end(), ranges.begin(), ranges.end());
    std::sort(no_decay_.begin(), no_decay_.end());
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
    add_floats(acc(), be_.region(TensorRole::gradient), count());
  }
  std::span<float> host_gradients() override {
    return {be_.region(TensorRole::gradient), static_cast<size_t>(count())};
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
  // The update of elements [begin, begin + n) of the flat regions, in
  // pieces where some are left out of the weight decay.
  void update(int64_t begin, int64_t n) {
    for_each_decay_piece(no_decay_, begin, n, [this](int64_t first, int64_t count, bool decayed) {
      update_piece(first, count, decayed);
    });
  }

  void update_piece(int64_t begin, int64_t n, bool decay) {
    float* p = be_.region(TensorRole::parameter) + begin;
    const float* g = be_.region(TensorRole::gradient) + begin;
    const OptimizerStep& st = st_;
    const float inv_scale = 1.0f / st.grad_scale;
    const float lr = static_cast<float>(st.lr);
    const float wd = decay ? static_cast<float>(s_.weight_decay) : 0.0f;
    if (s_.name == "adamw") {
      AdamWStep a;
      a.inv_scale = inv_scale;
      a.decay = 1.0f - lr * wd;
      a.b1 = static_cast<float>(s_.beta1);
      a.b2 = static_cast<float>(s_.beta2);
      a.eps = static_cast<float>(s_.eps);
      a.step_size = static_cast<float>(st.lr / (1.0 - std::pow(s_.beta1, double(st.step))));
      a.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(s_.beta2, double(st.step))));
      bf16_t* p_bf16 = be_.bf16_weights() ? be_.bf16_weights() + begin : nullptr;
      adamw_kernel(p, g, state(0) + begin, state(1) + begin, p_bf16, n, a);
    } else {
      const float mom = static_cast<float>(s_.momentum);
      sgd_kernel(p, g, mom != 0.0f ? state(0) + begin : nullptr, n, inv_scale, lr, wd, mom,
                 s_.nesterov, !momentum_started_);
      started_this_step_ = started_this_step_ || mom != 0.0f;
    }
  }

  // SGD's momentum buffers start as the first step's update: once a step
  // has begun them, later steps add to them.
  void end_of_step() {
    momentum_started_ = momentum_started_ || started_this_step_;
    started_this_step_ = false;
  }

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
  bool started_this_step_ = false;  // SGD: this step's update has begun its momentum buffers
  bool found_inf_ = false;
  OptimizerStep st_;
  std::vector<std::pair<int64_t, int64_t>> no_decay_;  // (first element, count), sorted
};

}  // namespace

std::unique_ptr<OptimizerOp> make_optimizer(CpuBackend& be, const OptimizerSettings& settings,
                                            bool accumulation) {
  return std::make_unique<CpuOptimizer>(be, settings, accumulation);
}

}  // namespace xrun::cpu
