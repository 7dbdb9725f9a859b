// engine/cuda/cuda_backend.h: the CUDA backend: cuDNN convolutions, batch
// norm and pooling, cuBLAS for the fc layer, xrun's own kernels for the rest
// (kernels.h). Activations are NHWC in the precision's storage type (fp32
// for fp32/tf32, fp16, bf16); parameters, gradients and optimizer state are
// fp32 in flat regions; fp16/bf16 runs add two half-precision mirrors of the
// parameter region (the weights the convolutions and fc read, the gradients
// they write) at the same element offsets. Everything is planned before
// allocate(), which makes one cudaMalloc per region; steps run on one stream
// with no allocation and no host synchronisation until the step ends.
// The op families are in conv.cpp, batchnorm.cpp, pooling.cpp, linear.cpp,
// loss.cpp, pointwise_ops.cpp and optimizer_op.cpp; GPT-2's (plain row-major
// [rows, C] activations) in matmul.cpp, layer_norm.cpp, attention.cpp and
// gpt2_pointwise.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/memory_plan.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace xrun::cuda {

enum class Layout : uint8_t {
  nhwc,   // activations: canonical NCHW dims, channels innermost (padded to c_pad)
  krsc,   // convolution weights: canonical OIHW dims, stored K,R,S,C (C padded)
  plain,  // vectors and matrices: canonical row-major
};

struct CudaTensor : Tensor {
  Layout layout = Layout::plain;
  DataType storage = DataType::f32;
  int64_t c_pad = 0;                          // stored channels (nhwc, krsc)
  int64_t pad_rows = 0;  // plain matrices: zero rows stored after the last (GPT-2's wte)
  cudnnTensorDescriptor_t desc = nullptr;     // nhwc activations
  cudnnFilterDescriptor_t filter = nullptr;   // krsc weights, in the compute type
  bool has_half = false;         // fp16/bf16 runs: a conv/fc weight with half mirrors
  void* half_weights = nullptr;  // parameters: the compute copy (fp16/bf16)
  void* half_grad = nullptr;     // their gradients: where cuDNN and cuBLAS write them
  ~CudaTensor() override;
  int64_t stored_elements() const;  // with channel (or row) padding
};

inline CudaTensor* as_cuda(Tensor* t) { return static_cast<CudaTensor*>(t); }
inline const CudaTensor* as_cuda(const Tensor* t) { return static_cast<const CudaTensor*>(t); }

// Every CUDA op: descriptors at construction; bind() once after allocation.
class CudaOp {
 public:
  virtual ~CudaOp() = default;
  virtual void bind() = 0;
};

class CudaBackend final : public Backend, public DeviceHooks {
 public:
  CudaBackend(int device, const BackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  Environment environment() const override;
  bool host_synchronous() const override { return false; }

  Tensor* tensor_like(const Tensor* like, const std::string& name, TensorRole role) override;
  Tensor* input(int64_t n, int64_t c, int64_t h, int64_t w) override;
  std::unique_ptr<ConvOp> conv(const std::string& name, const ConvShape& shape, Tensor* x,
                               Tensor* dx) override;
  std::unique_ptr<BatchNormOp> batch_norm(const std::string& name, Tensor* x, Tensor* dx,
                                          BnActivation act, Tensor* residual,
                                          Tensor* d_residual) override;
  std::unique_ptr<PoolOp> max_pool(const std::string& name, Tensor* x, Tensor* dx,
                                   int64_t kernel, int64_t stride, int64_t pad) override;
  std::unique_ptr<PoolOp> global_avg_pool(const std::string& name, Tensor* x,
                                           Tensor* dx) override;
  std::unique_ptr<LinearOp> linear(const std::string& name, Tensor* x, Tensor* dx,
                                   int64_t out_features) override;
  std::unique_ptr<LossOp> softmax_cross_entropy(Tensor* logits, Tensor* dlogits) override;
  PointwiseOps& pointwise() override;
  std::unique_ptr<OptimizerOp> optimizer(const OptimizerSettings& settings,
                                         bool accumulation) override;
  // GPT-2's families
  Tensor* token_input(int64_t batch, int64_t tokens_per_row) override;
  std::unique_ptr<EmbeddingOp> embedding(const std::string& wte_name, const std::string& wpe_name,
                                         Tensor* tokens, int64_t vocab, int64_t context,
                                         int64_t width) override;
  std::unique_ptr<LayerNormOp> layer_norm(const std::string& name, Tensor* x, Tensor* dx,
                                          bool add_to_dx) override;
  std::unique_ptr<LinearOp> linear_in_out(const std::string& name, Tensor* x, Tensor* dx,
                                          int64_t out_features) override;
  std::unique_ptr<LinearOp> linear_tied(const std::string& name, Tensor* x, Tensor* dx,
                                        Tensor* weight, Tensor* weight_grad) override;
  std::unique_ptr<ActivationOp> causal_attention(const std::string& name, Tensor* qkv,
                                                 Tensor* dqkv, int64_t batch,
                                                 int64_t heads) override;
  std::unique_ptr<ActivationOp> gelu(const std::string& name, Tensor* x, Tensor* dx) override;
  std::unique_ptr<ResidualAddOp> residual_add(const std::string& name, Tensor* a, Tensor* da,
                                              Tensor* b, Tensor* db) override;
  void load_tokens(const int32_t* tokens, const int32_t* targets, int rows) override;

  void allocate() override;
  int64_t allocated_bytes() const override { return allocated_bytes_; }
  int64_t peak_memory_bytes() const override;
  std::vector<MemoryRecord> memory_plan() const override;
  std::vector<ConvAlgoRecord> conv_algorithms() const override { return algo_records_; }
  double conv_algorithm_search_ms() const override { return algo_search_ms_; }

  void write(Tensor* t, std::span<const float> canonical) override;
  void read(const Tensor* t, std::span<float> canonical) override;
  void write_labels(std::span<const int32_t> labels) override;
  void load_batch(const uint8_t* images, const int32_t* labels, int count,
                  std::span<const float> mean, std::span<const float> std,
                  const BatchAugment* augment) override;
  bool augments_batches() const override { return true; }
  void synchronize() override;
  DeviceHooks* device() override { return this; }
  // DeviceHooks
  void stage_batch(const uint8_t* images, const int32_t* labels, int count,
                   const BatchAugment* augment) override;
  void consume_staged_batch(std::span<const float> mean, std::span<const float> std) override;
  void profiler_start() override;
  void profiler_stop() override;
  void begin_capture() override;
  void end_capture() override;
  void replay() override;
  void* allocate_host(size_t bytes, bool pinned) override;
  void free_host(void* p, bool pinned) override;

  // ---- for the op files ----
  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  DataType activation_type() const { return act_; }
  bool half() const { return act_ != DataType::f32; }
  cudnnDataType_t cudnn_type() const;
  cudnnMathType_t conv_math() const;
  cublasComputeType_t gemm_compute() const;
  cudaDataType_t gemm_type() const;
  Precision precision() const { return precision_; }
  const BackendOptions& options() const { return options_; }
  int compute_capability() const { return cc_major_ * 10 + cc_minor_; }
  void add_algo_record(ConvAlgoRecord r, double search_ms);
  // A shape searched earlier in this run (benchmark mode searches each
  // distinct convolution once).
  const ConvAlgoChoice* searched(const std::string& key) const;

  // Declares an NHWC activation of canonical dims [N, C, H, W] (or [N, C]).
  CudaTensor* declare_activation(const std::string& name, std::vector<int64_t> dims,
                                 int64_t c_pad, TensorRole role);
  // Declares a parameter (fp32 master, and its half copy in fp16/bf16 runs
  // when `compute_copy`) and its gradient at the same offsets; a plain
  // matrix may keep `pad_rows` zero rows after its last (never written by
  // write(), never read by read(); their gradients must stay zero).
  std::pair<CudaTensor*, CudaTensor*> declare_parameter(const std::string& name,
                                                        std::vector<int64_t> dims, Layout layout,
                                                        int64_t c_pad, bool compute_copy,
                                                        int64_t pad_rows = 0);
  CudaTensor* declare_buffer(const std::string& name, std::vector<int64_t> dims, size_t bytes,
                             TensorRole role, DataType storage = DataType::f32);
  // The shared workspace for cuDNN and cuBLAS calls (the largest any op needs).
  void need_workspace(size_t bytes);
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The op scratch (GPT-2's attention: its per-head blocks), the largest any
  // op asks for, shared: live only inside one op call on the one stream.
  void need_scratch(size_t bytes) { scratch_bytes_ = std::max(scratch_bytes_, bytes); }
  void* scratch() const { return scratch_; }
  void register_op(CudaOp* op) { ops_.push_back(op); }
  // Flat regions for the optimizer.
  float* region(TensorRole role) const;
  int64_t parameter_count() const;  // elements of the parameter region
  void* half_weights_region() const { return half_weights_; }
  void* half_grads_region() const { return half_grads_; }
  void declare_mirror(const std::string& name);
  float* mirror_region(const std::string& name) const;
  CudaTensor* labels() const { return labels_; }

 private:
  std::vector<MemoryRecord> plan_extras() const;
  CudaTensor& new_tensor(const std::string& name, std::vector<int64_t> dims, TensorRole role);
  void check_memory_fits() const;
  void* device_alloc(size_t bytes, const char* what);

  int device_;
  Precision precision_;
  DataType act_;
  BackendOptions options_;
  int cc_major_ = 0, cc_minor_ = 0;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  cudaEvent_t copied_ = nullptr, consumed_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::deque<CudaTensor> tensors_;
  MemoryPlan plan_{256};
  void* half_weights_ = nullptr;
  void* half_grads_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  uint8_t* image_staging_ = nullptr;  // uint8 batch on the device, before normalisation
  int32_t* label_staging_ = nullptr;  // its labels, before they replace the last batch's
  int32_t* draw_staging_ = nullptr;   // its augmentation draws (3 per sample)
  int staged_count_ = -1;             // rows of the staged batch; -1 = none staged
  Augmentation staged_augment_;       // what the staged batch's normalisation applies
  CudaTensor* input_ = nullptr;
  CudaTensor* tokens_ = nullptr;  // GPT-2's token input, int32 [B, T]
  CudaTensor* labels_ = nullptr;
  std::vector<CudaOp*> ops_;
  std::vector<void*> allocations_;
  std::unique_ptr<PointwiseOps> pointwise_;
  std::vector<ConvAlgoRecord> algo_records_;
  double algo_search_ms_ = 0;
  int64_t allocated_bytes_ = 0;
};

// Op factories, one per file.
std::unique_ptr<ConvOp> make_conv(CudaBackend& be, const std::string& name,
                                  const ConvShape& shape, CudaTensor* x, CudaTensor* dx);
std::unique_ptr<BatchNormOp> make_batch_norm(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, BnActivation act,
                                             CudaTensor* residual, CudaTensor* d_residual);
std::unique_ptr<PoolOp> make_max_pool(CudaBackend& be, const std::string& name, CudaTensor* x,
                                      CudaTensor* dx, int64_t kernel, int64_t stride,
                                      int64_t pad);
std::unique_ptr<PoolOp> make_global_avg_pool(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx);
std::unique_ptr<LinearOp> make_linear(CudaBackend& be, const std::string& name, CudaTensor* x,
                                      CudaTensor* dx, int64_t out_features);
std::unique_ptr<LossOp> make_softmax_cross_entropy(CudaBackend& be, CudaTensor* logits,
                                                   CudaTensor* dlogits, CudaTensor* labels);
std::unique_ptr<PointwiseOps> make_pointwise(CudaBackend& be);
std::unique_ptr<OptimizerOp> make_optimizer(CudaBackend& be, const OptimizerSettings& settings,
                                            bool accumulation);
// GPT-2's.
std::unique_ptr<EmbeddingOp> make_embedding(CudaBackend& be, const std::string& wte_name,
                                            const std::string& wpe_name, CudaTensor* tokens,
                                            int64_t vocab, int64_t context, int64_t width);
std::unique_ptr<LayerNormOp> make_layer_norm(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, bool add_to_dx);
std::unique_ptr<LinearOp> make_linear_in_out(CudaBackend& be, const std::string& name,
                                             CudaTensor* x, CudaTensor* dx, int64_t out_features);
std::unique_ptr<LinearOp> make_linear_tied(CudaBackend& be, const std::string& name,
                                           CudaTensor* x, CudaTensor* dx, CudaTensor* weight,
                                           CudaTensor* weight_grad);
std::unique_ptr<ActivationOp> make_causal_attention(CudaBackend& be, const std::string& name,
                                                    CudaTensor* qkv, CudaTensor* dqkv,
                                                    int64_t batch, int64_t heads);
std::unique_ptr<ActivationOp> make_gelu(CudaBackend& be, const std::string& name, CudaTensor* x,
                                        CudaTensor* dx);
std::unique_ptr<ResidualAddOp> make_residual_add(CudaBackend& be, const std::string& name,
                                                 CudaTensor* a, CudaTensor* da, CudaTensor* b,
                                                 CudaTensor* db);

}  // namespace xrun::cuda
