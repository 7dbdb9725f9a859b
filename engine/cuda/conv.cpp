// engine/cuda/conv.cpp: convolution on cuDNN (NHWC activations, KRSC
// weights): forward, backward-data, backward-filter, each with its own
// algorithm and math type. train.cudnn_benchmark = false takes cuDNN's
// heuristic (Get*_v7, runs nothing); true times every candidate on the real
// buffers (Find*Ex, when the memory plan is allocated, before the first
// step: never inside a measured figure); "cached" reuses choices made before
// on the same card, driver and cuDNN version and searches only what is
// missing. Every choice is recorded (ConvAlgoRecord) with its workspace and
// measured time. In fp16/bf16 runs the weights are read from, and the weight
// gradients written to, the half-precision mirrors of the fp32 regions.
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "engine/cuda/conv_rules.h"
#include "engine/cuda/cuda_backend.h"

namespace xrun::cuda {

namespace {

enum class Pass { forward, backward_data, backward_filter };
const char* pass_name(Pass p) {
  switch (p) {
    case Pass::forward: return "forward";
    case Pass::backward_data: return "backward_data";
    case Pass::backward_filter: return "backward_filter";
  }
  return "?";
}

std::string algo_name(Pass pass, int algo) {
  static const char* fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                              "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                   "WINOGRAD_NONFUSED"};
  static const char* bwd_filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                     "WINOGRAD_NONFUSED", "FFT_TILING"};
  auto pick = [&](const char* const* names, int n) {
    return algo >= 0 && algo < n ? std::string(names[algo]) : "ALGO_" + std::to_string(algo);
  };
  switch (pass) {
    case Pass::forward: return pick(fwd, 8);
    case Pass::backward_data: return pick(bwd_data, 6);
    case Pass::backward_filter: return pick(bwd_filter, 7);
  }
  return "?";
}

// One cuDNN performance result, whatever the pass.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  float time_ms;
  size_t memory;
  cudnnMathType_t math;
};

template <class Perf>
Candidate candidate(const Perf& p) {
  return {static_cast<int>(p.algo), p.status, p.time, p.memory, p.mathType};
}

class CudaConv final : public ConvOp, public CudaOp {
 public:
  CudaConv(CudaBackend& be, const std::string& name, const ConvShape& sh, CudaTensor* x,
           CudaTensor* dx)
      : be_(be), name_(name), x_(x), dx_(dx) {
    if (x->dims != std::vector<int64_t>{sh.n, sh.c, sh.h, sh.w})
      throw std::logic_error(name + ": input dims do not match the conv shape");
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_, static_cast<int>(sh.pad), static_cast<int>(sh.pad), static_cast<int>(sh.stride),
        static_cast<int>(sh.stride), 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, be.conv_math()));

    // The weight's channels match the input's padded channels (conv1 in
    // fp16/bf16 reads 8 channels of which 5 are zero).
    auto [w, wg] = be.declare_parameter(name + ".weight", {sh.k, sh.c, sh.r, sh.s}, Layout::krsc,
                                        x->c_pad, true);
    weight = w;
    weight_grad = wg;
    y = be.declare_activation(name + ".y", {sh.n, sh.k, sh.out_h(), sh.out_w()}, sh.k,
                              TensorRole::activation);
    dy = be.declare_activation(name + ".dy", y->dims, sh.k, TensorRole::activation_grad);
    char key[256];
    std::snprintf(key, sizeof key, "n%lld c%lld h%lld w%lld k%lld r%lld s%lld u%lld p%lld %s",
                  (long long)sh.n, (long long)x->c_pad, (long long)sh.h, (long long)sh.w,
                  (long long)sh.k, (long long)sh.r, (long long)sh.s, (long long)sh.stride,
                  (long long)sh.pad, to_string(be.precision()));
    key_ = key;

    limit_ = be.options().conv_workspace_limit;
    if (be.options().cudnn_benchmark == CudnnBenchmark::off) {
      for (Pass p : passes()) choose_heuristic(p);
    } else {
      // The search needs the real buffers: it runs in bind(). The workspace
      // it may use is reserved now.
      be.need_workspace(limit_);
    }
    be.register_op(this);
  }

  ~CudaConv() override {
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  }

  void bind() override {
    const CudnnBenchmark mode = be_.options().cudnn_benchmark;
    if (mode == CudnnBenchmark::off) return;
    for (Pass p : passes()) {
      const std::string key = key_ + " " + pass_name(p);
      if (mode == CudnnBenchmark::cached) {
        auto it = be_.options().algo_cache.find(key);
        if (it != be_.options().algo_cache.end() &&
            it->second.workspace_bytes <= static_cast<int64_t>(be_.workspace_bytes())) {
          use(p, it->second, "cached", 0.0);
          continue;
        }
      }
      if (const ConvAlgoChoice* earlier = be_.searched(key)) {
        use(p, *earlier, "benchmark", 0.0);  // same shape, already timed in this run
        continue;
      }
      search(p);
    }
  }

  void forward() override {
    const float one = 1.0f, zero = 0.0f;
    const Choice& c = choice_[0];
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, c.math));
    CUDNN_CHECK(cudnnConvolutionForward(be_.cudnn(), &one, x_->desc, x_->data, w()->filter,
                                        weights(), conv_, static_cast<cudnnConvolutionFwdAlgo_t>(c.algo),
                                        be_.workspace(), c.workspace, &zero, as_cuda(y)->desc,
                                        y->data));
  }

  void backward_data() override {
    if (!dx_) return;
    const float one = 1.0f, zero = 0.0f;
    const Choice& c = choice_[1];
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, c.math));
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        be_.cudnn(), &one, w()->filter, weights(), as_cuda(dy)->desc, dy->data, conv_,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), be_.workspace(), c.workspace, &zero,
        dx_->desc, dx_->data));
  }

  void backward_weights() override {
    const float one = 1.0f, zero = 0.0f;
    const Choice& c = choice_[2];
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, c.math));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        be_.cudnn(), &one, x_->desc, x_->data, as_cuda(dy)->desc, dy->data, conv_,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), be_.workspace(), c.workspace, &zero,
        w()->filter, weight_gradient()));
  }

 private:
  struct Choice {
    int algo = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    size_t workspace = 0;
  };

  CudaTensor* w() const { return as_cuda(weight); }
  const void* weights() const { return w()->has_half ? w()->half_weights : w()->data; }
  void* weight_gradient() const {
    CudaTensor* g = as_cuda(weight_grad);
    return g->has_half ? g->half_grad : g->data;
  }
  std::vector<Pass> passes() const {
    if (dx_) return {Pass::forward, Pass::backward_data, Pass::backward_filter};
    return {Pass::forward, Pass::backward_filter};
  }
  static int index(Pass p) { return static_cast<int>(p); }

  // See conv_rules.h: any successful candidate within the limit; fp32
  // executes it with FMA math (use()).
  bool acceptable(const Candidate& c) const { return usable_candidate(c.status, c.memory, limit_); }

  std::vector<Candidate> heuristic_candidates(Pass p) {
    constexpr int kMax = 16;
    int returned = 0;
    std::vector<Candidate> out;
    CudaTensor* ct = as_cuda(y);
    switch (p) {
      case Pass::forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(be_.cudnn(), x_->desc, w()->filter,
                                                           conv_, ct->desc, kMax, &returned, perf));
        for (int i = 0; i < returned; ++i) out.push_back(candidate(perf[i]));
        break;
      }
      case Pass::backward_data: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            be_.cudnn(), w()->filter, ct->desc, conv_, dx_->desc, kMax, &returned, perf));
        for (int i = 0; i < returned; ++i) out.push_back(candidate(perf[i]));
        break;
      }
      case Pass::backward_filter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            be_.cudnn(), x_->desc, ct->desc, conv_, w()->filter, kMax, &returned, perf));
        for (int i = 0; i < returned; ++i) out.push_back(candidate(perf[i]));
        break;
      }
    }
    return out;
  }

  void choose_heuristic(Pass p) {
    for (const Candidate& c : heuristic_candidates(p)) {
      if (!acceptable(c)) continue;
      ConvAlgoChoice ch;
      ch.algo = c.algo;
      ch.math_type = static_cast<int>(c.math);
      ch.workspace_bytes = static_cast<int64_t>(c.memory);
      ch.time_ms = NAN;
      use(p, ch, "heuristic", 0.0);
      be_.need_workspace(c.memory);
      return;
    }
    throw std::runtime_error(name_ + ": cuDNN offers no usable " + pass_name(p) +
                             " algorithm for " + key_);
  }

  // Times every candidate on the real buffers (cuDNN's Find*Ex).
  void search(Pass p) {
    constexpr int kMax = 16;
    int returned = 0;
    std::vector<Candidate> found;
    CudaTensor* ct = as_cuda(y);
    CudaTensor* gt = as_cuda(dy);
    const size_t ws = be_.workspace_bytes();
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, be_.conv_math()));
    const auto t0 = std::chrono::steady_clock::now();
    switch (p) {
      case Pass::forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            be_.cudnn(), x_->desc, x_->data, w()->filter, weights(), conv_, ct->desc, y->data,
            kMax, &returned, perf, be_.workspace(), ws));
        for (int i = 0; i < returned; ++i) found.push_back(candidate(perf[i]));
        break;
      }
      case Pass::backward_data: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            be_.cudnn(), w()->filter, weights(), gt->desc, dy->data, conv_, dx_->desc, dx_->data,
            kMax, &returned, perf, be_.workspace(), ws));
        for (int i = 0; i < returned; ++i) found.push_back(candidate(perf[i]));
        break;
      }
      case Pass::backward_filter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            be_.cudnn(), x_->desc, x_->data, gt->desc, dy->data, conv_, w()->filter,
            weight_gradient(), kMax, &returned, perf, be_.workspace(), ws));
        for (int i = 0; i < returned; ++i) found.push_back(candidate(perf[i]));
        break;
      }
    }
    const double search_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // Find*Ex returns candidates fastest first.
    for (const Candidate& c : found) {
      if (!acceptable(c) || c.memory > ws) continue;
      ConvAlgoChoice ch;
      ch.algo = c.algo;
      ch.math_type = static_cast<int>(c.math);
      ch.workspace_bytes = static_cast<int64_t>(c.memory);
      ch.time_ms = c.time_ms;
      use(p, ch, "benchmark", search_ms);
      return;
    }
    throw std::runtime_error(name_ + ": no " + std::string(pass_name(p)) +
                             " algorithm succeeded within the workspace for " + key_);
  }

  void use(Pass p, const ConvAlgoChoice& ch, const char* source, double search_ms) {
    Choice& c = choice_[index(p)];
    c.algo = ch.algo;
    c.math = execution_math(be_.precision(), static_cast<cudnnMathType_t>(ch.math_type));
    c.workspace = static_cast<size_t>(ch.workspace_bytes);
    ConvAlgoRecord r;
    r.layer = name_;
    r.pass = pass_name(p);
    r.key = key_ + " " + pass_name(p);
    r.algo_name = algo_name(p, ch.algo);
    r.source = source;
    r.choice = ch;
    r.choice.math_type = static_cast<int>(c.math);  // what runs, not what cuDNN reported
    be_.add_algo_record(std::move(r), search_ms);
  }

  CudaBackend& be_;
  std::string name_;
  CudaTensor* x_;
  CudaTensor* dx_;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::string key_;
  size_t limit_ = 0;
  Choice choice_[3];
};

}  // namespace

std::unique_ptr<ConvOp> make_conv(CudaBackend& be, const std::string& name,
                                  const ConvShape& shape, CudaTensor* x, CudaTensor* dx) {
  return std::make_unique<CudaConv>(be, name, shape, x, dx);
}

}  // namespace xrun::cuda
