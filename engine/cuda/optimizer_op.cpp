// engine/cuda/optimizer_op.cpp: the optimizer op family on the device:
// AdamW / SGD over the flat fp32 parameter region in one kernel (optimizer.cu),
// reading gradients from the fp32 region plus, in fp16/bf16 runs, the
// half-precision gradient mirror, and refreshing the half weight copies; the
// inf/NaN check that lets an fp16 step be skipped on the device with no
// host round trip; gradient accumulation (the step after accumulate_end
// reads the fp32 sum itself); optimizer state as canonical tensors for
// checkpoints. Parameters left out of the weight decay (GPT-2's biases and
// layer norms) split the update into launches over contiguous pieces, each
// reading the decayed or the undecayed copy of the step's values.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

class CudaOptimizer final : public OptimizerOp {
 public:
  CudaOptimizer(CudaBackend& be, const OptimizerSettings& s, bool accumulation)
      : be_(be), s_(s), accumulation_(accumulation) {
    optimizer_state_names(s);  // refuses an unknown optimizer
    for (const std::string& state : state_names()) be.declare_mirror(state);
    if (accumulation) be.declare_mirror("grad_accum");
    found_inf_ = be.declare_buffer("optimizer.found_inf", {1}, sizeof(int), TensorRole::workspace);
    clip_partials_ = be.declare_buffer("optimizer.clip_partials", {kClipBlocks + 1},
                                       (kClipBlocks + 1) * sizeof(double), TensorRole::workspace);
    // [0]: the step's values; [1]: the same without weight decay.
    args_ = be.declare_buffer("optimizer.args", {2}, 2 * sizeof(Args), TensorRole::workspace);
  }

  std::vector<std::string> state_names() const override { return optimizer_state_names(s_); }

  // The step's values go to the device (from pageable memory: the copy is
  // done when this returns); apply() queues the update that reads them.
  void set_step(const OptimizerStep& st) override {
    checked_ = st.check_finite;
    const float inv_scale = 1.0f / st.grad_scale;
    if (s_.name == "adamw") {
      AdamWArgs& a = host_args_[0].adamw;
      a.lr = static_cast<float>(st.lr);
      a.weight_decay = static_cast<float>(s_.weight_decay);
      a.beta1 = static_cast<float>(s_.beta1);
      a.beta2 = static_cast<float>(s_.beta2);
      a.eps = static_cast<float>(s_.eps);
      a.step_size = static_cast<float>(st.lr / (1.0 - std::pow(s_.beta1, double(st.step))));
      a.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(s_.beta2, double(st.step))));
      a.inv_scale = inv_scale;
    } else {
      SgdArgs& a = host_args_[0].sgd;
      a.lr = static_cast<float>(st.lr);
      a.weight_decay = static_cast<float>(s_.weight_decay);
      a.momentum = static_cast<float>(s_.momentum);
      a.inv_scale = inv_scale;
      a.nesterov = s_.nesterov;
      a.first = !momentum_started_;
      // If this first step turns out skipped (found_inf), the buffer is still
      // unset and the next applied step starts it.
      first_pending_ = s_.momentum != 0 && a.first;
      momentum_started_ = momentum_started_ || s_.momentum != 0;
    }
    host_args_[1] = host_args_[0];
    if (s_.name == "adamw")
      host_args_[1].adamw.weight_decay = 0;
    else
      host_args_[1].sgd.weight_decay = 0;
    CUDA_CHECK(cudaMemcpyAsync(args_->data, host_args_, sizeof host_args_, cudaMemcpyHostToDevice,
                               be_.stream()));
  }

  void exclude_from_decay(std::span<Tensor* const> params) override {
    const auto ranges = parameter_ranges(params);
    no_decay_.insert(no_decay_.end(), ranges.begin(), ranges.end());
    std::sort(no_decay_.begin(), no_decay_.end());
  }

  void apply() override {
    const GradientSource g = gradients();
    from_sum_ = false;
    const int64_t n = be_.parameter_count();
    int* flag = nullptr;
    if (checked_) {
      flag = static_cast<int*>(found_inf_->data);
      CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), be_.stream()));
      check_finite(g, n, flag, be_.stream());
    }
    // Decayed and undecayed pieces in turn (one piece without exclusions).
    for_each_decay_piece(no_decay_, 0, n, [&](int64_t first, int64_t count, bool decayed) {
      update(g, first, count, decayed ? 0 : 1, flag);
    });
    // A folded step left its sums in the fp32 region, which the next step's
    // GEMMs do not overwrite (they write the half mirror): cleared, or the
    // next update would read them again.
    if (folded_) {
      CUDA_CHECK(cudaMemsetAsync(be_.region(TensorRole::gradient), 0,
                                 static_cast<size_t>(n) * sizeof(float), be_.stream()));
      folded_ = false;
    }
  }

  // On the gradients apply() would read now (this micro-batch's fp32 part
  // and half mirror, or the accumulated sum), on the device.
  void clip_grad_norm(double limit, float grad_scale) override {
    const GradientSource g = gradients();
    cuda::clip_grad_norm(const_cast<float*>(g.g32), const_cast<void*>(g.g16), g.half_type,
                         be_.parameter_count(), 1.0f / grad_scale, limit,
                         static_cast<double*>(clip_partials_->data), be_.stream());
  }

  bool found_inf() override {
    if (!checked_) return false;
    int flag = 0;
    CUDA_CHECK(cudaMemcpyAsync(&flag, found_inf_->data, sizeof flag, cudaMemcpyDeviceToHost,
                               be_.stream()));
    CUDA_CHECK(cudaStreamSynchronize(be_.stream()));
    if (flag && first_pending_) momentum_started_ = false;
    first_pending_ = false;
    return flag != 0;
  }

  void zero_grad() override {
    const size_t bytes = static_cast<size_t>(be_.parameter_count()) * sizeof(float);
    CUDA_CHECK(cudaMemsetAsync(be_.region(TensorRole::gradient), 0, bytes, be_.stream()));
    if (be_.half_grads_region())
      CUDA_CHECK(cudaMemsetAsync(be_.half_grads_region(), 0, bytes / 2, be_.stream()));
  }

  void accumulate_begin() override { accumulate(true); }
  void accumulate_add() override { accumulate(false); }
  // The next step reads the sum where it is. (Copying it back into the fp32
  // gradient region would leave it there for the next accumulate_begin in
  // fp16/bf16 runs, whose conv and fc gradients go only to the half mirror:
  // the sum would keep growing, g, 2g, 3g...)
  void accumulate_end() override {
    need_accumulation();
    from_sum_ = true;
  }

  // What data-parallel ranks sum: the fp32 sum after accumulate_end, else
  // the fp32 region (with the half mirror folded in by fold_half_gradients).
  DeviceGradients device_gradients() override {
    const auto n = static_cast<size_t>(be_.parameter_count());
    if (from_sum_) return {be_.mirror_region("grad_accum"), n, be_.stream()};
    return {be_.region(TensorRole::gradient), n, be_.stream()};
  }
  // g32[i] = g32[i] + g16[i], g16[i] = 0 over [begin, end): apply() then
  // reads g32 + 0, the same value as g32 + g16 unfolded.
  void fold_half_gradients(size_t begin, size_t end) override {
    if (from_sum_ || !be_.half_grads_region() || end <= begin) return;
    GradientSource g = gradients();
    float* g32 = be_.region(TensorRole::gradient) + begin;
    g.g32 = g32;
    char* g16 = static_cast<char*>(be_.half_grads_region()) + begin * 2;  // 2-byte halves
    g.g16 = g16;
    accumulate_gradients(g32, g, static_cast<int64_t>(end - begin), /*first=*/true, be_.stream());
    CUDA_CHECK(cudaMemsetAsync(g16, 0, (end - begin) * 2, be_.stream()));
    folded_ = true;
  }

  void read_state(int which, const Tensor* param, std::span<float> canonical) override {
    CudaTensor v = view(which, param);
    be_.read(&v, canonical);
  }
  void write_state(int which, const Tensor* param, std::span<const float> canonical) override {
    CudaTensor v = view(which, param);
    be_.write(&v, canonical);
    if (s_.name == "sgd") momentum_started_ = true;
  }

 private:
  // This micro-batch's gradients (fp32 region + half mirror), or after
  // accumulate_end the fp32 sum alone.
  GradientSource gradients() const {
    GradientSource g;
    if (from_sum_) {
      g.g32 = be_.mirror_region("grad_accum");
      g.half_type = be_.activation_type();
      return g;
    }
    g.g32 = be_.region(TensorRole::gradient);
    g.g16 = be_.half_grads_region();
    g.half_type = be_.activation_type();
    return g;
  }
  // The update of [begin, begin + count) of every region, with the step's
  // values `which` (0: decayed, 1: undecayed).
  void update(const GradientSource& all, int64_t begin, int64_t count, int which,
              const int* flag) {
    const size_t half = element_size(be_.activation_type());
    GradientSource g = all;
    if (g.g32) g.g32 += begin;
    if (g.g16) g.g16 = static_cast<const char*>(g.g16) + begin * half;
    float* p = be_.region(TensorRole::parameter) + begin;
    void* p16 = be_.half_weights_region();
    if (p16) p16 = static_cast<char*>(p16) + begin * half;
    Args* args = static_cast<Args*>(args_->data) + which;
    if (s_.name == "adamw") {
      adamw_step(p, p16, be_.activation_type(), g, be_.mirror_region("exp_avg") + begin,
                 be_.mirror_region("exp_avg_sq") + begin, count, &args->adamw, flag,
                 be_.stream());
    } else {
      float* buf = s_.momentum != 0 ? be_.mirror_region("momentum_buffer") + begin : nullptr;
      sgd_step(p, p16, be_.activation_type(), g, buf, count, &args->sgd, flag, be_.stream());
    }
  }
  void need_accumulation() const {
    if (!accumulation_) throw std::logic_error("optimizer made without accumulation");
  }
  void accumulate(bool first) {
    need_accumulation();
    from_sum_ = false;
    accumulate_gradients(be_.mirror_region("grad_accum"), gradients(), be_.parameter_count(),
                         first, be_.stream());
  }
  // A tensor with the parameter's layout over the state region at its offset.
  CudaTensor view(int which, const Tensor* param) {
    if (param->role != TensorRole::parameter)
      throw std::invalid_argument(param->name + " is not a parameter");
    const CudaTensor* p = as_cuda(param);
    CudaTensor v;
    v.name = p->name + "." + state_names().at(which);
    v.dims = p->dims;
    v.layout = p->layout;
    v.storage = DataType::f32;
    v.c_pad = p->c_pad;
    v.pad_rows = p->pad_rows;
    v.bytes = p->bytes;
    v.role = TensorRole::state;
    v.data = reinterpret_cast<char*>(be_.mirror_region(state_names().at(which))) + p->offset;
    return v;
  }

  union Args {
    AdamWArgs adamw;
    SgdArgs sgd;
  };

  CudaBackend& be_;
  OptimizerSettings s_;
  Args host_args_[2]{};
  std::vector<std::pair<int64_t, int64_t>> no_decay_;  // (first element, count), sorted
  CudaTensor* args_ = nullptr;
  bool accumulation_;
  CudaTensor* found_inf_ = nullptr;
  CudaTensor* clip_partials_ = nullptr;
  bool checked_ = false;
  bool momentum_started_ = false;
  bool first_pending_ = false;
  bool from_sum_ = false;  // accumulate_end .. apply: the step reads grad_accum
  bool folded_ = false;    // fold_half_gradients .. apply: the fp32 region holds sums
};

}  // namespace

std::unique_ptr<OptimizerOp> make_optimizer(CudaBackend& be, const OptimizerSettings& settings,
                                            bool accumulation) {
  return std::make_unique<CudaOptimizer>(be, settings, accumulation);
}

}  // namespace xrun::cuda
