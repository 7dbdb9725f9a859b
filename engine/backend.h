// engine/backend.h: the one interface every backend implements, one op family
// per section. The model (engine/model/resnet.cpp) builds its network by
// asking the backend for ops bound to tensors; each op creates its outputs in
// the layout the backend prefers, so the plan is fixed before training starts
// and nothing is allocated inside the step loop. Backends: engine/cpu/
// (oneDNN) and engine/cuda/ (cuDNN + cuBLAS), one file per family each.
//
// Build order: create ops (declares tensors) -> allocate() (one allocation per
// memory region, binds every tensor) -> run steps. Execution may be
// asynchronous (CUDA); `synchronize()` waits for the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/records.h"
#include "core/tensor.h"

namespace xrun {

// ----------------------------------------------------------------- shapes --
struct ConvShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1, r = 1, s = 1;         // output channels, kernel height/width
  int64_t stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - s) / stride + 1; }
};

enum class BnActivation { none, relu, add_relu };  // y = act(bn(x) [+ residual])

// ------------------------------------------------------------ op families --
// Convolution, no bias (ResNet's convs have none). Owns its weight parameter.
class ConvOp {
 public:
  virtual ~ConvOp() = default;
  virtual void forward() = 0;           // y = conv(x, w)
  virtual void backward_data() = 0;     // dx = conv_transpose(dy, w); no-op without dx
  virtual void backward_weights() = 0;  // dw = conv_bwd_weights(x, dy)
  Tensor* y = nullptr;   // output (created by the op)
  Tensor* dy = nullptr;  // gradient of the output (created by the op)
  Tensor* weight = nullptr;
  Tensor* weight_grad = nullptr;
};

// Batch norm over N,H,W per channel, optionally fused with ReLU or with a
// residual add then ReLU. Training forward uses batch statistics and updates
// running statistics PyTorch's way (momentum 0.1, unbiased running variance):
// torch.nn.BatchNorm2d's defaults, for every backend.
constexpr double kBatchNormEps = 1e-5;
constexpr double kBatchNormMomentum = 0.1;
class BatchNormOp {
 public:
  virtual ~BatchNormOp() = default;
  virtual void forward_train() = 0;
  virtual void forward_infer() = 0;  // running statistics, no update
  // From dy: dx, dgamma, dbeta and, for add_relu, the residual's gradient.
  // dy is consumed: its contents afterwards are unspecified on every
  // backend (the CUDA engine's unfused BN+ReLU masks it in place; the CPU
  // engine masks as it reads). Whoever calls backward() again writes dy
  // again first, as the model's backward pass does.
  virtual void backward() = 0;
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
  Tensor* gamma = nullptr;       // "weight"
  Tensor* beta = nullptr;        // "bias"
  Tensor* gamma_grad = nullptr;
  Tensor* beta_grad = nullptr;
  Tensor* running_mean = nullptr;
  Tensor* running_var = nullptr;
};

// Max pooling (kernel, stride, pad); global average pooling to [N, C].
class PoolOp {
 public:
  virtual ~PoolOp() = default;
  virtual void forward_train() = 0;  // keeps what backward needs
  virtual void forward_infer() = 0;
  virtual void backward() = 0;       // dx from dy
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
};

// y[N, O] = x[N, I] w[O, I]^T + b.
class LinearOp {
 public:
  virtual ~LinearOp() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;  // dx (when bound), dw, db
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
  Tensor* weight = nullptr;
  Tensor* bias = nullptr;
  Tensor* weight_grad = nullptr;
  Tensor* bias_grad = nullptr;
};

// Softmax cross-entropy, mean over the valid rows of the batch; writes
// dlogits = (softmax - onehot) * grad_scale / valid. The loss sum, top-1 hits
// and rows add up over calls until read_results() returns and resets them,
// so a device backend need not synchronise every step.
class LossOp {
 public:
  virtual ~LossOp() = default;
  // The gradient scale of the next forward_backward calls (loss scaling and
  // accumulation); kept on the device, so a recorded CUDA graph sees changes.
  virtual void set_grad_scale(float grad_scale) = 0;
  virtual void forward_backward(int valid_rows) = 0;
  void forward_backward(int valid_rows, float grad_scale) {
    set_grad_scale(grad_scale);
    forward_backward(valid_rows);
  }
  virtual void forward(int valid_rows) = 0;  // evaluation: loss and correct count only
  struct Results {
    double loss_sum = 0;  // sum over valid rows of -log p(label)
    int64_t correct = 0;  // top-1 hits
    int rows = 0;
  };
  virtual Results read_results() = 0;  // totals since the last read; may synchronise
  Tensor* labels = nullptr;            // int32 [N], written by Backend::load_batch
};

// Elementwise helpers on tensors of the same shape and layout.
class PointwiseOps {
 public:
  virtual ~PointwiseOps() = default;
  virtual void add_inplace(Tensor* dst, const Tensor* src) = 0;  // dst += src
  virtual void copy(Tensor* dst, const Tensor* src) = 0;
};

// ------------------------------------------------- GPT-2's op families --
// The transformer's tensors are plain row-major [rows, C] on every backend,
// rows = batch x tokens per row (B*T); canonical layout is the storage
// layout. Parameters keep transformers' GPT2LMHeadModel layouts: Conv1D
// weights [in, out], the embeddings [V, C] and [context, C].

// Token + position embedding: y[b T + t] = wte[tokens[b T + t]] + wpe[t].
// backward(): wpe's gradient written; wte's gradient ADDED to (the tied
// output layer, whose backward pass runs first, writes it).
class EmbeddingOp {
 public:
  virtual ~EmbeddingOp() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
  Tensor* wte = nullptr;
  Tensor* wpe = nullptr;
  Tensor* wte_grad = nullptr;
  Tensor* wpe_grad = nullptr;
};

// torch.nn.LayerNorm over each row (eps 1e-5, weight and bias per channel).
// backward(): dx written, or added to where the op was made with
// add_to_dx (a residual stream whose other gradient is already there).
class LayerNormOp {
 public:
  virtual ~LayerNormOp() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
  Tensor* gamma = nullptr;  // "weight"
  Tensor* beta = nullptr;   // "bias"
  Tensor* gamma_grad = nullptr;
  Tensor* beta_grad = nullptr;
};

// An op with one input, one output and no parameters: GPT-2's causal
// self-attention (qkv [rows, 3C] -> y [rows, C]) and its GELU (tanh form).
// backward() writes dx.
class ActivationOp {
 public:
  virtual ~ActivationOp() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
};

// y = a + b (a residual connection); backward() writes dy into da and db.
class ResidualAddOp {
 public:
  virtual ~ResidualAddOp() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;
  Tensor* y = nullptr;
  Tensor* dy = nullptr;
};

// One optimizer step over the whole flat parameter region: every parameter,
// gradient and state value sits at the same offset in its region.
struct OptimizerStep {
  double lr = 0;
  int64_t step = 1;          // 1-based count of applied steps, for AdamW's bias correction
  float grad_scale = 1;      // gradients are divided by this first (loss scaling)
  bool check_finite = false; // skip the update when any gradient is inf/NaN (see found_inf)
};
class OptimizerOp {
 public:
  virtual ~OptimizerOp() = default;
  // The per-step values (learning rate, step count, gradient scale), kept on
  // the device so a recorded CUDA graph sees them; then the update itself.
  virtual void set_step(const OptimizerStep& s) = 0;
  virtual void apply() = 0;
  void step(const OptimizerStep& s) {
    set_step(s);
    apply();
  }
  // The same update for a few parameters only, called in the backward pass
  // as soon as their gradients are complete (train.per_layer_update), after
  // set_step: every element goes through the same operations in the same
  // order as in apply(), so the weights come out bit-identical. Never with
  // check_finite (a skip needs every gradient first). A backend that updates
  // in one launch (CUDA) says false in per_layer() and throws here.
  virtual bool per_layer() const { return false; }
  virtual void apply_to(std::span<Tensor* const> params);
  // After a step with check_finite: whether a gradient was inf/NaN (the
  // update was then skipped). May synchronise with the device.
  virtual bool found_inf() = 0;
  // Leaves these parameters out of the weight decay (GPT-2 decays its
  // matrices only, as nanoGPT and llm.c do: biases, layer norms stay
  // undecayed); called once before the first step. Default: every
  // parameter decays, and the call throws std::runtime_error.
  virtual void exclude_from_decay(std::span<Tensor* const> params);
  virtual void zero_grad() = 0;
  // Adds the gradient region into the accumulation region (train.accumulate)
  // or copies it back; backends without accumulation support throw.
  virtual void accumulate_begin() = 0;  // acc = grad
  virtual void accumulate_add() = 0;    // acc += grad
  virtual void accumulate_end() = 0;    // the next step() reads acc (CPU: grad = acc)
  // The flat gradients the next step() reads (after accumulate_end with
  // accumulation), in host memory: what data-parallel ranks sum before the
  // update. Empty where they live on a device (the CUDA engine: NCCL's part).
  virtual std::span<float> host_gradients() { return {}; }
  // The same where they live on a device (the CUDA engine): the flat fp32
  // gradients the next step() reads and the CUDA stream the update runs on,
  // for NCCL to sum in place. In fp16/bf16 runs part of each step's
  // gradients sits in a half-precision mirror: fold_half_gradients moves
  // [begin, end) of it into the fp32 region (queued on that stream) before
  // that range is summed, so the update then reads the sums alone.
  struct DeviceGradients {
    float* data = nullptr;
    size_t count = 0;
    void* stream = nullptr;
  };
  virtual DeviceGradients device_gradients() { return {}; }
  virtual void fold_half_gradients(size_t begin, size_t end) {}
  // torch.nn.utils.clip_grad_norm_'s rule (train.clip_grad_norm) on the
  // gradients the next step() reads, divided by grad_scale first: their
  // global L2 norm, in double, and where it is above `limit` every gradient
  // scaled by limit / (norm + 1e-6); a NaN norm changes nothing (the
  // inf/NaN checks see it). Default: on host_gradients(), std::logic_error
  // where they are empty; the CUDA engine's stays on the device.
  virtual void clip_grad_norm(double limit, float grad_scale);
  // Optimizer state for checkpoints, canonical per parameter.
  virtual std::vector<std::string> state_names() const = 0;  // "exp_avg", "exp_avg_sq" / "momentum_buffer"
  // The state `which` (index into state_names) of one parameter, canonical layout.
  virtual void read_state(int which, const Tensor* param, std::span<float> canonical) = 0;
  virtual void write_state(int which, const Tensor* param, std::span<const float> canonical) = 0;
};

// The parameters' element ranges in the flat regions, (first element,
// count), sorted: what an optimizer keeps of exclude_from_decay's list.
// std::invalid_argument for a tensor that is not a parameter.
std::vector<std::pair<int64_t, int64_t>> parameter_ranges(std::span<Tensor* const> params);

// Cuts elements [begin, begin + n) of the flat regions into the pieces an
// optimizer updates in turn: f(first, count, decayed) in order, decayed
// false inside the `no_decay` ranges (sorted, as parameter_ranges gives
// them), true elsewhere.
template <class F>
void for_each_decay_piece(const std::vector<std::pair<int64_t, int64_t>>& no_decay, int64_t begin,
                          int64_t n, F&& f) {
  int64_t at = begin;
  const int64_t end = begin + n;
  for (const auto& [first, count] : no_decay) {
    const int64_t lo = std::max(first, at), hi = std::min(first + count, end);
    if (lo >= hi) continue;
    if (at < lo) f(at, lo - at, true);
    f(lo, hi - lo, false);
    at = hi;
  }
  if (at < end) f(at, end - at, true);
}

// --------------------------------------------------------------- backend --
struct OptimizerSettings {
  std::string name = "adamw";  // adamw | sgd
  double weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0;
  bool nesterov = false;
};

// The optimizer state per parameter, by PyTorch's names (what checkpoints
// keep, every backend alike): AdamW's two moments, SGD's momentum buffer
// when it has momentum. std::invalid_argument for an unknown optimizer.
inline std::vector<std::string> optimizer_state_names(const OptimizerSettings& s) {
  if (s.name == "adamw") return {"exp_avg", "exp_avg_sq"};
  if (s.name != "sgd") throw std::invalid_argument("unknown optimizer '" + s.name + "'");
  if (s.momentum != 0) return {"momentum_buffer"};
  return {};
}

// What a backend is made with (make_backend).
struct BackendOptions {
  int threads = 0;                    // CPU threads, 0 = all cores
  Precision precision = Precision::fp32;
  CudnnBenchmark cudnn_benchmark = CudnnBenchmark::off;
  std::map<std::string, ConvAlgoChoice> algo_cache;  // "cached": earlier choices by key
  size_t conv_workspace_limit = size_t{1} << 30;     // bytes for any one convolution
};

// Training augmentation for load_batch: per sample crop_y, crop_x, flip
// (3 int32 each, as data::AugmentDraw), applied where the flags say.
struct BatchAugment {
  bool random_crop = false;
  bool hflip = false;
  const int32_t* draws = nullptr;
};

// What only a device backend offers, as an optional part of the interface
// (as ggml leaves optional entries of its backend interface empty): the
// trainer uses each where Backend::device() is not null.
class DeviceHooks {
 public:
  virtual ~DeviceHooks() = default;
  // Overlapped input: stage_batch starts copying a batch on its own stream
  // and returns at once (the host memory must stay as it is until the
  // synchronize() after the batch is consumed); consume_staged_batch then
  // normalises it into the input, ordered after the copy on the device. The
  // step runner stages step N+1's batch before step N's synchronisation, so
  // the copy runs while the GPU computes. load_batch = stage + consume +
  // wait for the copy.
  virtual void stage_batch(const uint8_t* images, const int32_t* labels, int count,
                           const BatchAugment* augment) = 0;
  virtual void consume_staged_batch(std::span<const float> mean, std::span<const float> std) = 0;
  // Around the measured steps: cudaProfilerStart/Stop, so `nsys profile
  // --capture-range=cudaProfilerApi` records only them.
  virtual void profiler_start() = 0;
  virtual void profiler_stop() = 0;
  // CUDA graphs: the work queued between begin_capture() and end_capture()
  // is recorded once (not run) and run again by each replay(). Only work
  // whose per-step values live on the device may be recorded.
  virtual void begin_capture() = 0;
  virtual void end_capture() = 0;
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual Environment environment() const = 0;
  // True when ops finish before they return (CPU): results may be read
  // every step at no cost. False (CUDA): the trainer reads them at intervals.
  virtual bool host_synchronous() const { return true; }

  // A new tensor with the shape and layout of `like` (e.g. a second gradient
  // buffer for a residual branch).
  virtual Tensor* tensor_like(const Tensor* like, const std::string& name, TensorRole role) = 0;
  // Model input: images [N, C, H, W] (f32, normalised by load_batch) and labels.
  virtual Tensor* input(int64_t n, int64_t c, int64_t h, int64_t w) = 0;
  // Op families. Each binds its inputs (and their gradients: dx may be null
  // where no gradient is wanted, e.g. the first convolution) and declares its
  // outputs and parameters. `name` is the torchvision module path ("layer1.0.conv1").
  virtual std::unique_ptr<ConvOp> conv(const std::string& name, const ConvShape& shape,
                                       Tensor* x, Tensor* dx) = 0;
  // add_relu: `residual` is added before the ReLU and its gradient is written
  // to `d_residual` (same shape and layout as `residual`).
  virtual std::unique_ptr<BatchNormOp> batch_norm(const std::string& name, Tensor* x, Tensor* dx,
                                                  BnActivation act, Tensor* residual,
                                                  Tensor* d_residual) = 0;
  virtual std::unique_ptr<PoolOp> max_pool(const std::string& name, Tensor* x, Tensor* dx,
                                           int64_t kernel, int64_t stride, int64_t pad) = 0;
  virtual std::unique_ptr<PoolOp> global_avg_pool(const std::string& name, Tensor* x,
                                                  Tensor* dx) = 0;
  virtual std::unique_ptr<LinearOp> linear(const std::string& name, Tensor* x, Tensor* dx,
                                           int64_t out_features) = 0;
  virtual std::unique_ptr<LossOp> softmax_cross_entropy(Tensor* logits, Tensor* dlogits) = 0;
  virtual PointwiseOps& pointwise() = 0;
  virtual std::unique_ptr<OptimizerOp> optimizer(const OptimizerSettings& settings,
                                                 bool accumulation) = 0;

  // GPT-2's families (see the section above). The defaults throw
  // std::runtime_error naming the backend: a backend without them cannot
  // build a transformer. Names are transformers' module paths
  // ("transformer.h.0.ln_1").
  // The embedding's names are its two modules' ("transformer.wte",
  // "transformer.wpe"; parameters "<module>.weight").
  // Token input: int32 [batch, tokens_per_row], written by load_tokens
  // (the loss's labels, one per token, then hold the next-token targets).
  virtual Tensor* token_input(int64_t batch, int64_t tokens_per_row);
  virtual std::unique_ptr<EmbeddingOp> embedding(const std::string& wte_name,
                                                 const std::string& wpe_name, Tensor* tokens,
                                                 int64_t vocab, int64_t context, int64_t width);
  virtual std::unique_ptr<LayerNormOp> layer_norm(const std::string& name, Tensor* x,
                                                  Tensor* dx, bool add_to_dx);
  // Conv1D: y[rows, O] = x[rows, I] w[I, O] + b (weight in transformers'
  // [in, out] layout); backward writes dx (when bound), dw and db.
  virtual std::unique_ptr<LinearOp> linear_in_out(const std::string& name, Tensor* x,
                                                  Tensor* dx, int64_t out_features);
  // The tied output layer: y[rows, V] = x[rows, C] weight[V, C]^T, no bias,
  // reading a weight another op owns; backward writes dx and WRITES
  // weight_grad (the embedding's backward pass adds its part afterwards).
  virtual std::unique_ptr<LinearOp> linear_tied(const std::string& name, Tensor* x, Tensor* dx,
                                                Tensor* weight, Tensor* weight_grad);
  // Causal self-attention from the fused projection qkv [B*T, 3C]
  // (transformers' GPT2Attention, dropout 0) to y [B*T, C].
  virtual std::unique_ptr<ActivationOp> causal_attention(const std::string& name, Tensor* qkv,
                                                         Tensor* dqkv, int64_t batch,
                                                         int64_t heads);
  virtual std::unique_ptr<ActivationOp> gelu(const std::string& name, Tensor* x, Tensor* dx);
  virtual std::unique_ptr<ResidualAddOp> residual_add(const std::string& name, Tensor* a,
                                                      Tensor* da, Tensor* b, Tensor* db);
  // Writes a batch of token windows: `rows` sequences of the token input's
  // length, and the next-token targets of each; rows beyond are zero.
  virtual void load_tokens(const int32_t* tokens, const int32_t* targets, int rows);

  // Makes one allocation per memory region and binds every declared tensor.
  // Throws std::runtime_error, before allocating anything, when the plan does
  // not fit the memory available (saying how much it needs, how much there
  // is, and the largest batch that would fit).
  virtual void allocate() = 0;
  virtual int64_t allocated_bytes() const = 0;
  // The plan by region (parameters, gradients, optimizer state, activations,
  // activation gradients, workspace, io, scratchpad): known before allocate().
  virtual std::vector<MemoryRecord> memory_plan() const = 0;
  virtual int64_t peak_memory_bytes() const = 0;

  // Canonical-layout exchange (checkpoints, initialisation, tests).
  virtual void write(Tensor* t, std::span<const float> canonical) = 0;
  virtual void read(const Tensor* t, std::span<float> canonical) = 0;
  // Writes the labels of the next loss call (tests; training uses load_batch).
  virtual void write_labels(std::span<const int32_t> labels) = 0;
  // Writes a batch: uint8 NCHW images normalised with mean/std, and labels.
  // Rows beyond `count` are zero. With `augment` (only where
  // augments_batches()), each sample is first cropped and flipped as its draw
  // says (data::augment_sample's semantics), on the device.
  virtual void load_batch(const uint8_t* images, const int32_t* labels, int count,
                          std::span<const float> mean, std::span<const float> std,
                          const BatchAugment* augment = nullptr) = 0;
  // Whether load_batch applies a BatchAugment (the CUDA backend: the loader
  // threads then only draw, and the pixels move on the GPU).
  virtual bool augments_batches() const { return false; }
  virtual void synchronize() = 0;
  // Host memory for batches; pinned (page-locked) where the device can copy
  // from it asynchronously. Default: 64-byte aligned memory.
  virtual void* allocate_host(size_t bytes, bool pinned);
  virtual void free_host(void* p, bool pinned);
  // The device-only hooks (below), or nullptr where the backend has none (CPU).
  virtual DeviceHooks* device() { return nullptr; }
  // Convolution algorithms chosen (CUDA) and the time spent choosing them.
  virtual std::vector<ConvAlgoRecord> conv_algorithms() const { return {}; }
  virtual double conv_algorithm_search_ms() const { return 0; }
};

// Creates the backend for a resolved device ("cpu", "cuda:0"). Throws
// std::runtime_error when the device cannot be used, with the reason.
std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options);

// Whether this build has the CUDA engine and a GPU it can run on.
bool cuda_engine_available();
// Why a GPU this machine has cannot train here ("" when none is present, or
// the CUDA engine can use one): a driver too old for this build's CUDA
// (driver_advice), an architecture the build has no kernels for, a build
// without the CUDA engine. What a run whose train.device = "auto" falls
// back to the CPU says, so that no CPU figure is read as the card's.
std::string gpu_unusable_reason();

// Total memory of a device ("cuda:N"); 0 for "cpu" or a device not present.
int64_t device_memory_bytes(const std::string& device);

}  // namespace xrun
