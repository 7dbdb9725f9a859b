// engine/cuda/cuda_backend.cpp: the CUDA backend's device set-up (stream,
// cuDNN and cuBLAS handles), memory plan (declare -> check it fits ->
// allocate: one cudaMalloc per region), canonical <-> device layout exchange
// through conversion kernels, and batch loading (an asynchronous copy on its
// own stream, then normalisation on the device).
#include "engine/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/data/loader.h"
#include "engine/device/device_info.h"
#include "engine/memory_plan.h"

namespace xrun::cuda {

namespace {

DataType storage_for(Precision precision) {
  switch (precision) {
    case Precision::fp16: return DataType::f16;
    case Precision::bf16: return DataType::bf16;
    case Precision::fp32:
    case Precision::tf32: return DataType::f32;
  }
  throw std::invalid_argument("unknown precision");
}

// A device buffer for one exchange (write/read): not on the training path.
struct Staging {
  void* p = nullptr;
  explicit Staging(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 4)); }
  ~Staging() { cudaFree(p); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

}  // namespace

// ------------------------------------------------------------- tensors --

CudaTensor::~CudaTensor() {
  if (desc) cudnnDestroyTensorDescriptor(desc);
  if (filter) cudnnDestroyFilterDescriptor(filter);
}

int64_t CudaTensor::stored_elements() const {
  if (layout == Layout::plain) return numel() + pad_rows * (dims.size() > 1 ? dims[1] : 1);
  const int64_t c = dims.size() > 1 ? dims[1] : 1;
  return numel() / c * c_pad;
}

// ------------------------------------------------------------- backend --

CudaBackend::CudaBackend(int device, const BackendOptions& options)
    : device_(device),
      precision_(options.precision),
      act_(storage_for(options.precision)),
      options_(options) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || device < 0 || device >= count)
    throw std::runtime_error(
        "device cuda:" + std::to_string(device) + " is not available: " +
        (e != cudaSuccess ? std::string(cudaGetErrorString(e))
                          : std::to_string(count) + " CUDA device(s) on this machine"));
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor_, cudaDevAttrComputeCapabilityMinor, device));
  const int cc = cc_major_ * 10 + cc_minor_;
  if ((precision_ == Precision::bf16 || precision_ == Precision::tf32) && cc < 80)
    throw std::runtime_error(std::string("precision '") + to_string(precision_) +
                             "' needs compute capability 8.0 or " +
                             "newer; cuda:" + std::to_string(device) + " is " +
                             std::to_string(cc_major_) + "." + std::to_string(cc_minor_));
  if (precision_ == Precision::fp16 && cc < 70)
    throw std::runtime_error("precision 'fp16' needs tensor cores (compute capability 7.0+)");
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&consumed_, cudaEventDisableTiming));
  CUDNN_CHECK(cudnnCreate(&cudnn_));
  CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // fp32 means fp32: no TF32 in cuBLAS unless asked for (the compute type
  // per call decides; this keeps the handle's default math out of it).
  CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  pointwise_ = make_pointwise(*this);
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  for (void* p : allocations_) cudaFree(p);
  if (cublas_) cublasDestroy(cublas_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (copied_) cudaEventDestroy(copied_);
  if (consumed_) cudaEventDestroy(consumed_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

Environment CudaBackend::environment() const {
  Environment env = collect_environment(name());
  env.fields["precision"] = to_string(precision_);
  return env;
}

cudnnDataType_t CudaBackend::cudnn_type() const {
  switch (act_) {
    case DataType::f16: return CUDNN_DATA_HALF;
    case DataType::bf16: return CUDNN_DATA_BFLOAT16;
    case DataType::f32: break;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnMathType_t CudaBackend::conv_math() const {
  if (half()) return CUDNN_TENSOR_OP_MATH;
  return precision_ == Precision::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

cublasComputeType_t CudaBackend::gemm_compute() const {
  return precision_ == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cudaDataType_t CudaBackend::gemm_type() const {
  switch (act_) {
    case DataType::f16: return CUDA_R_16F;
    case DataType::bf16: return CUDA_R_16BF;
    case DataType::f32: break;
  }
  return CUDA_R_32F;
}

void CudaBackend::add_algo_record(ConvAlgoRecord r, double search_ms) {
  algo_records_.push_back(std::move(r));
  algo_search_ms_ += search_ms;
}

const ConvAlgoChoice* CudaBackend::searched(const std::string& key) const {
  for (const ConvAlgoRecord& r : algo_records_)
    if (r.key == key && r.source == "benchmark") return &r.choice;
  return nullptr;
}

// ---------------------------------------------------------- memory plan --

CudaTensor& CudaBackend::new_tensor(const std::string& name, std::vector<int64_t> dims,
                                    TensorRole role) {
  CudaTensor& t = tensors_.emplace_back();
  t.name = name;
  t.dims = std::move(dims);
  t.role = role;
  return t;
}

CudaTensor* CudaBackend::declare_activation(const std::string& name, std::vector<int64_t> dims,
                                            int64_t c_pad, TensorRole role) {
  CudaTensor& t = new_tensor(name, std::move(dims), role);
  const int64_t n = t.dims[0], c = t.dims[1];
  const int64_t h = t.dims.size() == 4 ? t.dims[2] : 1, w = t.dims.size() == 4 ? t.dims[3] : 1;
  t.layout = Layout::nhwc;
  t.storage = act_;
  t.dtype = act_ == DataType::f32 ? xrun::DType::f32
            : act_ == DataType::f16 ? xrun::DType::f16
                                    : xrun::DType::bf16;
  t.c_pad = std::max(c, c_pad);
  // A cuDNN descriptor for the [N, C, H, W] activations cuDNN's ops read;
  // none for [rows, C] (pooled features, GPT-2's rows, whose logits may
  // pass the 2^31 elements cudnnSetTensor4dDescriptor takes).
  if (t.dims.size() == 4) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&t.desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(t.desc, CUDNN_TENSOR_NHWC, cudnn_type(),
                                           static_cast<int>(n), static_cast<int>(t.c_pad),
                                           static_cast<int>(h), static_cast<int>(w)));
  }
  t.bytes = static_cast<size_t>(t.stored_elements()) * element_size(act_);
  t.offset = plan_.place(role, t.bytes);
  return &t;
}

std::pair<CudaTensor*, CudaTensor*> CudaBackend::declare_parameter(const std::string& name,
                                                                   std::vector<int64_t> dims,
                                                                   Layout layout, int64_t c_pad,
                                                                   bool compute_copy,
                                                                   int64_t pad_rows) {
  CudaTensor* pair[2];
  for (int i = 0; i < 2; ++i) {
    const TensorRole role = i == 0 ? TensorRole::parameter : TensorRole::gradient;
    CudaTensor& t = new_tensor(i == 0 ? name : name + ".grad", dims, role);
    t.layout = layout;
    t.storage = DataType::f32;
    t.c_pad = layout == Layout::krsc ? std::max(c_pad, t.dims[1]) : 0;
    t.pad_rows = layout == Layout::plain ? pad_rows : 0;
    if (layout == Layout::krsc) {
      CUDNN_CHECK(cudnnCreateFilterDescriptor(&t.filter));
      CUDNN_CHECK(cudnnSetFilter4dDescriptor(
          t.filter, half() ? cudnn_type() : CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
          static_cast<int>(t.dims[0]), static_cast<int>(t.c_pad), static_cast<int>(t.dims[2]),
          static_cast<int>(t.dims[3])));
    }
    t.bytes = static_cast<size_t>(t.stored_elements()) * sizeof(float);
    t.offset = plan_.place(role, t.bytes);
    pair[i] = &t;
  }
  if (pair[0]->offset != pair[1]->offset)
    throw std::logic_error("parameter and gradient regions diverged");
  // The half mirrors are bound in allocate().
  pair[0]->has_half = pair[1]->has_half = half() && compute_copy;
  return {pair[0], pair[1]};
}

CudaTensor* CudaBackend::declare_buffer(const std::string& name, std::vector<int64_t> dims,
                                        size_t bytes, TensorRole role, DataType storage) {
  CudaTensor& t = new_tensor(name, std::move(dims), role);
  t.layout = Layout::plain;
  t.storage = storage;
  t.bytes = bytes;
  t.offset = plan_.place(role, bytes);
  return &t;
}

void CudaBackend::need_workspace(size_t bytes) { workspace_bytes_ = std::max(workspace_bytes_, bytes); }

void CudaBackend::declare_mirror(const std::string& name) { plan_.add_mirror(name); }

float* CudaBackend::mirror_region(const std::string& name) const {
  return reinterpret_cast<float*>(plan_.mirror_base(name));
}

float* CudaBackend::region(TensorRole role) const {
  return reinterpret_cast<float*>(plan_.base(role));
}

int64_t CudaBackend::parameter_count() const {
  return static_cast<int64_t>(plan_.region_bytes(TensorRole::parameter) / sizeof(float));
}

// What the CUDA backend holds beside the plan's regions and mirrors.
std::vector<MemoryRecord> CudaBackend::plan_extras() const {
  std::vector<MemoryRecord> out;
  const int64_t params = static_cast<int64_t>(plan_.region_bytes(TensorRole::parameter));
  if (half()) {
    out.push_back({"parameters.half", params / 2});
    out.push_back({"gradients.half", params / 2});
  }
  out.push_back({"conv_workspace", static_cast<int64_t>(workspace_bytes_)});
  if (scratch_bytes_) out.push_back({"op_scratch", static_cast<int64_t>(scratch_bytes_)});
  if (input_)  // uint8 pixels, an int32 label and three int32 augmentation draws per image
    out.push_back({"input.staging", input_->dims[0] * (input_->dims[1] * input_->dims[2] *
                                                           input_->dims[3] + 4 + 12)});
  return out;
}

std::vector<MemoryRecord> CudaBackend::memory_plan() const { return plan_.records(plan_extras()); }

void CudaBackend::check_memory_fits() const {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // cuDNN and cuBLAS keep some memory of their own: leave 5% and 256 MiB.
  const int64_t usable = static_cast<int64_t>(free_bytes) - static_cast<int64_t>(total_bytes / 20) -
                         (int64_t{256} << 20);
  plan_.check_fits(plan_extras(), input_ ? input_->dims[0] : tokens_ ? tokens_->dims[0] : 1,
                   usable, "on " + name());
}

void* CudaBackend::device_alloc(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("out of device memory allocating ") + what + " (" +
                             format_gib(static_cast<int64_t>(bytes)) + "): " + cudaGetErrorString(e));
  allocations_.push_back(p);
  allocated_bytes_ += static_cast<int64_t>(bytes);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void CudaBackend::allocate() {
  if (plan_.bound()) throw std::logic_error("cuda backend: allocate() called twice");
  check_memory_fits();
  for (size_t i = 0; i < 7; ++i) {
    const TensorRole role = static_cast<TensorRole>(i);
    plan_.set_base(role, static_cast<char*>(device_alloc(plan_.region_bytes(role), region_name(role))));
  }
  const size_t param_bytes = plan_.region_bytes(TensorRole::parameter);
  for (const auto& entry : plan_.mirrors())
    plan_.set_mirror_base(entry.first,
                          static_cast<char*>(device_alloc(param_bytes, entry.first.c_str())));
  plan_.mark_bound();
  if (half()) {
    half_weights_ = device_alloc(param_bytes / 2, "half weights");
    half_grads_ = device_alloc(param_bytes / 2, "half gradients");
  }
  workspace_ = device_alloc(workspace_bytes_, "convolution workspace");
  scratch_ = device_alloc(scratch_bytes_, "op scratch");
  if (input_) {
    image_staging_ = static_cast<uint8_t*>(device_alloc(
        static_cast<size_t>(input_->dims[0] * input_->dims[1] * input_->dims[2] * input_->dims[3]),
        "uint8 images"));
    label_staging_ = static_cast<int32_t*>(
        device_alloc(static_cast<size_t>(input_->dims[0]) * sizeof(int32_t), "labels"));
    draw_staging_ = static_cast<int32_t*>(device_alloc(
        static_cast<size_t>(input_->dims[0]) * 3 * sizeof(int32_t), "augmentation draws"));
  }
  for (CudaTensor& t : tensors_) {
    t.data = plan_.base(t.role) + t.offset;
    // Half mirrors: the same element offset, two bytes per element.
    if (t.has_half && t.role == TensorRole::parameter)
      t.half_weights = static_cast<char*>(half_weights_) + t.offset / 2;
    if (t.has_half && t.role == TensorRole::gradient)
      t.half_grad = static_cast<char*>(half_grads_) + t.offset / 2;
  }
  if (workspace_) CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_, workspace_bytes_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (CudaOp* op : ops_) op->bind();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int64_t CudaBackend::peak_memory_bytes() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return allocated_bytes_;
  // What this process and its libraries hold on the device now: the plan is
  // allocated once, so this is the peak.
  return static_cast<int64_t>(total_bytes - free_bytes);
}

// --------------------------------------------------------------- tensors --

Tensor* CudaBackend::tensor_like(const Tensor* like, const std::string& name, TensorRole role) {
  const CudaTensor* l = as_cuda(like);
  if (l->layout != Layout::nhwc) throw std::logic_error("tensor_like needs an activation: " + name);
  return declare_activation(name, l->dims, l->c_pad, role);
}

Tensor* CudaBackend::input(int64_t n, int64_t c, int64_t h, int64_t w) {
  if (input_) throw std::logic_error("cuda backend: input() called twice");
  if (c > 16) throw std::invalid_argument("cuda backend: at most 16 input channels");
  // Tensor cores want channel counts that are multiples of 8 in fp16/bf16:
  // the 1- or 3-channel input is padded with zero channels.
  const int64_t c_pad = half() ? (c + 7) / 8 * 8 : c;
  input_ = declare_activation("input", {n, c, h, w}, c_pad, TensorRole::io);
  return input_;
}

std::unique_ptr<ConvOp> CudaBackend::conv(const std::string& name, const ConvShape& shape,
                                          Tensor* x, Tensor* dx) {
  return make_conv(*this, name, shape, as_cuda(x), as_cuda(dx));
}

std::unique_ptr<BatchNormOp> CudaBackend::batch_norm(const std::string& name, Tensor* x,
                                                     Tensor* dx, BnActivation act,
                                                     Tensor* residual, Tensor* d_residual) {
  return make_batch_norm(*this, name, as_cuda(x), as_cuda(dx), act, as_cuda(residual),
                         as_cuda(d_residual));
}

std::unique_ptr<PoolOp> CudaBackend::max_pool(const std::string& name, Tensor* x, Tensor* dx,
                                              int64_t kernel, int64_t stride, int64_t pad) {
  return make_max_pool(*this, name, as_cuda(x), as_cuda(dx), kernel, stride, pad);
}

std::unique_ptr<PoolOp> CudaBackend::global_avg_pool(const std::string& name, Tensor* x,
                                                     Tensor* dx) {
  return make_global_avg_pool(*this, name, as_cuda(x), as_cuda(dx));
}

std::unique_ptr<LinearOp> CudaBackend::linear(const std::string& name, Tensor* x, Tensor* dx,
                                              int64_t out_features) {
  return make_linear(*this, name, as_cuda(x), as_cuda(dx), out_features);
}

std::unique_ptr<LossOp> CudaBackend::softmax_cross_entropy(Tensor* logits, Tensor* dlogits) {
  if (labels_) throw std::logic_error("cuda backend: one loss per model");
  const int64_t n = logits->dims[0];
  labels_ = declare_buffer("labels", {n}, static_cast<size_t>(n) * sizeof(int32_t),
                           TensorRole::io);
  labels_->dtype = DType::i32;
  return make_softmax_cross_entropy(*this, as_cuda(logits), as_cuda(dlogits), labels_);
}

PointwiseOps& CudaBackend::pointwise() { return *pointwise_; }

// ------------------------------------------------------- GPT-2's families --

Tensor* CudaBackend::token_input(int64_t batch, int64_t tokens_per_row) {
  if (tokens_ || input_) throw std::logic_error("cuda backend: one model input");
  tokens_ = declare_buffer("tokens", {batch, tokens_per_row},
                           static_cast<size_t>(batch * tokens_per_row) * sizeof(int32_t),
                           TensorRole::io);
  tokens_->dtype = DType::i32;
  return tokens_;
}

std::unique_ptr<EmbeddingOp> CudaBackend::embedding(const std::string& wte_name,
                                                    const std::string& wpe_name, Tensor* tokens,
                                                    int64_t vocab, int64_t context,
                                                    int64_t width) {
  return make_embedding(*this, wte_name, wpe_name, as_cuda(tokens), vocab, context, width);
}

std::unique_ptr<LayerNormOp> CudaBackend::layer_norm(const std::string& name, Tensor* x,
                                                     Tensor* dx, bool add_to_dx) {
  return make_layer_norm(*this, name, as_cuda(x), as_cuda(dx), add_to_dx);
}

std::unique_ptr<LinearOp> CudaBackend::linear_in_out(const std::string& name, Tensor* x,
                                                     Tensor* dx, int64_t out_features) {
  return make_linear_in_out(*this, name, as_cuda(x), as_cuda(dx), out_features);
}

std::unique_ptr<LinearOp> CudaBackend::linear_tied(const std::string& name, Tensor* x, Tensor* dx,
                                                   Tensor* weight, Tensor* weight_grad) {
  return make_linear_tied(*this, name, as_cuda(x), as_cuda(dx), as_cuda(weight),
                          as_cuda(weight_grad));
}

std::unique_ptr<ActivationOp> CudaBackend::causal_attention(const std::string& name, Tensor* qkv,
                                                            Tensor* dqkv, int64_t batch,
                                                            int64_t heads) {
  return make_causal_attention(*this, name, as_cuda(qkv), as_cuda(dqkv), batch, heads);
}

std::unique_ptr<ActivationOp> CudaBackend::gelu(const std::string& name, Tensor* x, Tensor* dx) {
  return make_gelu(*this, name, as_cuda(x), as_cuda(dx));
}

std::unique_ptr<ResidualAddOp> CudaBackend::residual_add(const std::string& name, Tensor* a,
                                                         Tensor* da, Tensor* b, Tensor* db) {
  return make_residual_add(*this, name, as_cuda(a), as_cuda(da), as_cuda(b), as_cuda(db));
}

// From pageable memory: each copy has left the host buffer when it returns,
// so the caller may refill it; the device reads them in stream order.
void CudaBackend::load_tokens(const int32_t* tokens, const int32_t* targets, int rows) {
  if (!tokens_ || !labels_) throw std::logic_error("load_tokens: model has no token input or loss");
  const int64_t batch = tokens_->dims[0], t = tokens_->dims[1];
  if (rows < 0 || rows > batch) throw std::invalid_argument("load_tokens: batch larger than the plan");
  if (labels_->dims[0] != batch * t)
    throw std::logic_error("load_tokens: the loss does not take one label per token");
  const size_t used = static_cast<size_t>(rows * t) * sizeof(int32_t);
  const size_t all = static_cast<size_t>(batch * t) * sizeof(int32_t);
  for (auto [dst, src] : {std::pair{tokens_, tokens}, std::pair{labels_, targets}}) {
    if (used) CUDA_CHECK(cudaMemcpyAsync(dst->data, src, used, cudaMemcpyHostToDevice, stream_));
    if (used < all)
      CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(dst->data) + used, 0, all - used, stream_));
  }
}

std::unique_ptr<OptimizerOp> CudaBackend::optimizer(const OptimizerSettings& settings,
                                                    bool accumulation) {
  return make_optimizer(*this, settings, accumulation);
}

// ------------------------------------------------------ canonical data --

void CudaBackend::write(Tensor* tensor, std::span<const float> canonical) {
  CudaTensor* t = as_cuda(tensor);
  if (static_cast<int64_t>(canonical.size()) != t->numel())
    throw std::invalid_argument("write " + t->name + ": " + std::to_string(canonical.size()) +
                                " values for " + std::to_string(t->numel()) + " elements");
  if (!t->data) throw std::logic_error("write before allocate(): " + t->name);
  Staging src(canonical.size_bytes());
  CUDA_CHECK(cudaMemcpyAsync(src.p, canonical.data(), canonical.size_bytes(),
                             cudaMemcpyHostToDevice, stream_));
  const auto& d = t->dims;
  switch (t->layout) {
    case Layout::nhwc:
      nchw_to_nhwc(src.f(), t->data, t->storage, d[0], d[1], d.size() == 4 ? d[2] : 1,
                   d.size() == 4 ? d[3] : 1, t->c_pad, stream_);
      break;
    case Layout::krsc:
      nchw_to_nhwc(src.f(), t->data, DataType::f32, d[0], d[1], d[2], d[3], t->c_pad, stream_);
      break;
    case Layout::plain:
      if (t->storage != DataType::f32) throw std::logic_error("write to a non-float buffer");
      CUDA_CHECK(cudaMemcpyAsync(t->data, src.p, canonical.size_bytes(), cudaMemcpyDeviceToDevice,
                                 stream_));
      break;
  }
  // Parameters: refresh the compute copy.
  if (t->role == TensorRole::parameter && t->half_weights)
    cast_from_float(static_cast<const float*>(t->data), t->half_weights, act_,
                    t->stored_elements(), stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::read(const Tensor* tensor, std::span<float> canonical) {
  const CudaTensor* t = as_cuda(tensor);
  if (static_cast<int64_t>(canonical.size()) != t->numel())
    throw std::invalid_argument("read " + t->name + ": room for " +
                                std::to_string(canonical.size()) + " values, tensor has " +
                                std::to_string(t->numel()));
  if (!t->data) throw std::logic_error("read before allocate(): " + t->name);
  Staging dst(canonical.size_bytes());
  const void* src = t->data;
  std::unique_ptr<Staging> sum;
  if (t->role == TensorRole::gradient && t->half_grad) {
    // A gradient written in half precision: the effective gradient is the
    // fp32 part (zero here) plus the half part.
    sum = std::make_unique<Staging>(static_cast<size_t>(t->stored_elements()) * sizeof(float));
    GradientSource g;
    g.g32 = static_cast<const float*>(t->data);
    g.g16 = t->half_grad;
    g.half_type = act_;
    accumulate_gradients(sum->f(), g, t->stored_elements(), true, stream_);
    src = sum->p;
  }
  const auto& d = t->dims;
  switch (t->layout) {
    case Layout::nhwc:
      nhwc_to_nchw(src, t->storage, dst.f(), d[0], d[1], d.size() == 4 ? d[2] : 1,
                   d.size() == 4 ? d[3] : 1, t->c_pad, stream_);
      break;
    case Layout::krsc:
      nhwc_to_nchw(src, DataType::f32, dst.f(), d[0], d[1], d[2], d[3], t->c_pad, stream_);
      break;
    case Layout::plain:
      if (t->storage != DataType::f32) throw std::logic_error("read of a non-float buffer");
      CUDA_CHECK(cudaMemcpyAsync(dst.p, src, canonical.size_bytes(), cudaMemcpyDeviceToDevice,
                                 stream_));
      break;
  }
  CUDA_CHECK(cudaMemcpyAsync(canonical.data(), dst.p, canonical.size_bytes(),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::write_labels(std::span<const int32_t> labels) {
  if (!labels_) throw std::logic_error("write_labels: model has no loss");
  if (static_cast<int64_t>(labels.size()) != labels_->dims[0])
    throw std::invalid_argument("write_labels: " + std::to_string(labels.size()) +
                                " labels for a batch of " + std::to_string(labels_->dims[0]));
  CUDA_CHECK(cudaMemcpyAsync(labels_->data, labels.data(), labels.size_bytes(),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::load_batch(const uint8_t* images, const int32_t* labels, int count,
                             std::span<const float> mean, std::span<const float> std,
                             const BatchAugment* augment) {
  stage_batch(images, labels, count, augment);
  consume_staged_batch(mean, std);
  // The caller reuses `images` once this returns.
  CUDA_CHECK(cudaEventSynchronize(copied_));
}

void CudaBackend::stage_batch(const uint8_t* images, const int32_t* labels, int count,
                              const BatchAugment* augment) {
  if (!input_ || !labels_) throw std::logic_error("load_batch: model has no input or loss");
  const int64_t n = input_->dims[0], c = input_->dims[1], h = input_->dims[2],
                w = input_->dims[3];
  if (count > n) throw std::invalid_argument("load_batch: batch larger than the plan");
  if (staged_count_ >= 0) throw std::logic_error("stage_batch: the staged batch was not consumed");
  const size_t image_bytes = static_cast<size_t>(count * c * h * w);
  // The copy waits until the previous batch's normalisation has read the
  // staging buffer, runs on its own stream (asynchronous from pinned host
  // memory, so it overlaps the compute stream's work), and the compute
  // stream waits for it in consume_staged_batch.
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, consumed_, 0));
  CUDA_CHECK(cudaMemcpyAsync(image_staging_, images, image_bytes, cudaMemcpyHostToDevice,
                             copy_stream_));
  CUDA_CHECK(cudaMemcpyAsync(label_staging_, labels, static_cast<size_t>(count) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, copy_stream_));
  // Augmentation: the draws travel with the batch; the normalisation pass
  // crops and flips as it reads.
  staged_augment_ = Augmentation{};
  if (augment && augment->draws && (augment->random_crop || augment->hflip)) {
    CUDA_CHECK(cudaMemcpyAsync(draw_staging_, augment->draws,
                               static_cast<size_t>(count) * 3 * sizeof(int32_t),
                               cudaMemcpyHostToDevice, copy_stream_));
    staged_augment_.draws = draw_staging_;
    staged_augment_.random_crop = augment->random_crop;
    staged_augment_.hflip = augment->hflip;
    staged_augment_.pad = data::kCropPad;
  }
  CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));
  staged_count_ = count;
}

void CudaBackend::consume_staged_batch(std::span<const float> mean, std::span<const float> std) {
  if (staged_count_ < 0) throw std::logic_error("consume_staged_batch: no batch was staged");
  const int64_t n = input_->dims[0], c = input_->dims[1], h = input_->dims[2],
                w = input_->dims[3];
  if (static_cast<int64_t>(mean.size()) != c || static_cast<int64_t>(std.size()) != c)
    throw std::invalid_argument("load_batch: mean/std need one value per channel");
  Normalisation norm{};
  for (int64_t ch = 0; ch < c; ++ch) {
    norm.scale[ch] = 1.0f / (255.0f * std[ch]);
    norm.shift[ch] = -mean[ch] / std[ch];
  }
  const int count = staged_count_;
  staged_count_ = -1;
  // The compute stream replaces the labels once the last loss has read them.
  CUDA_CHECK(cudaStreamWaitEvent(stream_, copied_, 0));
  CUDA_CHECK(cudaMemcpyAsync(labels_->data, label_staging_,
                             static_cast<size_t>(count) * sizeof(int32_t),
                             cudaMemcpyDeviceToDevice, stream_));
  if (count < n)  // padded rows: label 0, never counted (valid rows only)
    CUDA_CHECK(cudaMemsetAsync(static_cast<int32_t*>(labels_->data) + count, 0,
                               static_cast<size_t>(n - count) * sizeof(int32_t), stream_));
  normalize_images(image_staging_, input_->data, act_, n, count, c, h, w, input_->c_pad, norm,
                   staged_augment_, stream_);
  CUDA_CHECK(cudaEventRecord(consumed_, stream_));
}

// Both streams: the next batch's copy (staged on the copy stream during the
// step) is done too, so a CUPTI flush after this sees no record in flight.
void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
}

void CudaBackend::profiler_start() { CUDA_CHECK(cudaProfilerStart()); }
void CudaBackend::profiler_stop() { CUDA_CHECK(cudaProfilerStop()); }

void CudaBackend::begin_capture() {
  if (graph_exec_) throw std::logic_error("cuda backend: a graph is already recorded");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

void CudaBackend::end_capture() {
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
  CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
}

void CudaBackend::replay() {
  if (!graph_exec_) throw std::logic_error("cuda backend: replay() before a graph was recorded");
  CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_));
}

void* CudaBackend::allocate_host(size_t bytes, bool pinned) {
  if (!pinned) return Backend::allocate_host(bytes, false);
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void CudaBackend::free_host(void* p, bool pinned) {
  if (!pinned) return Backend::free_host(p, false);
  cudaFreeHost(p);
}

}  // namespace xrun::cuda
