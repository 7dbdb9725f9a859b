// engine/cpu/cpu_backend.h: the CPU backend on oneDNN (2.x and 3.x, through
// dnnl_compat.h). Tensors keep the layout oneDNN's primitives prefer (blocked
// nChw16c / nChw8c activations, blocked weights); primitives are created
// once when the model is built,
// with one shared user scratchpad; every tensor lives in one allocation per
// memory region. Precision fp32, or bf16 (on CPUs with AVX512_BF16 or AMX):
// activations and their gradients in bf16, convolution and pooling in
// oneDNN's bf16 kernels with fp32 accumulation; parameters, gradients and
// optimizer state stay fp32 (each convolution keeps bf16 copies of its
// weight, remade after every update: weights_version()); batch-norm sums,
// the fc layer and the loss in fp32. The op families are in conv.cpp, batchnorm.cpp (xrun's own
// loops on those layouts, not oneDNN's), pooling.cpp, linear.cpp, loss.cpp,
// pointwise.cpp and optimizer.cpp; GPT-2's (plain fp32 [rows, C] tensors at
// every precision; in bf16 runs the Conv1D and tied layers' GEMMs read bf16
// copies of their operands on AMX) in matmul.cpp, layer_norm.cpp,
// attention.cpp and gpt2_pointwise.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/dnnl_compat.h"
#include "engine/memory_plan.h"

// Elementwise loops (optimizer, residual sums, normalisation) are compiled
// for AVX-512, AVX2 and baseline x86-64 and picked at load time, so one
// binary runs anywhere and still uses the machine's vector width.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define XRUN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define XRUN_VECTOR_CLONES
#endif

namespace xrun::cpu {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

struct CpuTensor : Tensor {
  memory::desc md;
  memory mem;  // created by allocate(), pointing into the tensor's region
};

inline CpuTensor* as_cpu(Tensor* t) { return static_cast<CpuTensor*>(t); }
inline const CpuTensor* as_cpu(const Tensor* t) { return static_cast<const CpuTensor*>(t); }

// Every CPU op: primitives are made at construction; bind() runs once after
// allocation and builds the argument maps, so executing allocates nothing.
class CpuOp {
 public:
  virtual ~CpuOp() = default;
  virtual void bind() = 0;
};

// A reorder between two layouts, made only when they differ (or always: a
// copy into a buffer of its own).
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  Args args;
  void make(const dnnl::engine& eng, const memory::desc& from, const memory::desc& to,
            bool even_if_same = false);
  void bind(const memory& from, const memory& to);
  void run(dnnl::stream& s);
};

class CpuBackend final : public Backend {
 public:
  // Throws std::runtime_error for a precision this CPU cannot train in
  // (bf16 without AVX512_BF16 or AMX; fp16 and tf32 everywhere).
  explicit CpuBackend(int threads, Precision precision = Precision::fp32);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  Environment environment() const override;

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
  std::unique_ptr<OptimizerOp> optimizer(const OptimizerSettings& settings,
                                         bool accumulation) override;

  void allocate() override;
  int64_t allocated_bytes() const override { return allocated_bytes_; }
  std::vector<MemoryRecord> memory_plan() const override;
  int64_t peak_memory_bytes() const override;

  void write(Tensor* t, std::span<const float> canonical) override;
  void read(const Tensor* t, std::span<float> canonical) override;
  void write_labels(std::span<const int32_t> labels) override;
  void load_batch(const uint8_t* images, const int32_t* labels, int count,
                  std::span<const float> mean, std::span<const float> std,
                  const BatchAugment* augment) override;
  void synchronize() override {}

  // ---- for the op files ----
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  dnnl::primitive_attr attr();  // user scratchpad
  // Declares a tensor of `md` in `role`'s region; bound by allocate(). Its
  // dtype is md's data type unless given.
  CpuTensor* declare(const std::string& name, std::vector<int64_t> dims, const memory::desc& md,
                     TensorRole role, std::optional<DType> dtype = std::nullopt);
  // Declares a parameter and its gradient at the same offset of their regions.
  std::pair<CpuTensor*, CpuTensor*> declare_parameter(const std::string& name,
                                                      std::vector<int64_t> dims,
                                                      const memory::desc& md);
  void need_scratchpad(const memory::desc& md);
  // A plain fp32 buffer of `dims` that every op asking with the same `key`
  // shares (an op's scratch, live only inside one call: GPT-2's attention
  // scores); declared by the first ask. std::logic_error when a later ask
  // is larger than the first.
  CpuTensor* shared_scratch(const std::string& key, const std::vector<int64_t>& dims);
  // Raw op scratch of the largest size any op asks for (GPT-2's bf16
  // copies of a GEMM's incoming gradient), live only inside one call;
  // op_scratch() is valid from allocate() (ops take it in bind()).
  void need_op_scratch(size_t bytes) { op_scratch_bytes_ = std::max(op_scratch_bytes_, bytes); }
  char* op_scratch() const { return op_scratch_base_; }
  const memory& scratchpad() const { return scratchpad_; }
  void register_op(CpuOp* op) { ops_.push_back(op); }
  // Flat views of a whole region, for the optimizer.
  float* region(TensorRole role);
  size_t region_bytes(TensorRole role) const;
  // Regions of the parameter region's size (optimizer state, gradient
  // accumulation): declared before allocate(), allocated with everything else.
  void declare_mirror(const std::string& name);
  float* mirror_region(const std::string& name);
  int threads() const { return threads_; }
  Precision precision() const { return precision_; }
  // The data type of activations and their gradients: f32, or bf16.
  memory::data_type activation_type() const { return act_type_; }
  // The layout a convolution's output asks for: oneDNN's choice (any), or
  // NHWC for bf16 on AMX, where oneDNN's AMX kernels (brgconv) take only
  // NHWC and would otherwise lose to its AVX512_BF16 ones on blocked data.
  memory::desc activation_md(const memory::dims& dims) const;
  // Counts changes to the parameter region (optimizer steps, write() of a
  // parameter), so ops keeping converted copies of a weight (bf16) know
  // when to remake them.
  uint64_t weights_version() const { return weights_version_; }
  void weights_changed() { ++weights_version_; }
  // A bf16 copy of the whole parameter region, element for element (GPT-2's
  // bf16 GEMMs read their weights from it), asked for before allocate().
  // The optimizer rounds every parameter into it as it updates the region
  // and then calls bf16_weights_written(): the copy is current until the
  // next weights_changed() (a write(), the next update). Where it is not
  // current, each op rounds its own weight's slice (weights_version()).
  void need_bf16_weights() { need_bf16_weights_ = true; }
  uint16_t* bf16_weights() const { return bf16_weights_; }
  void bf16_weights_written() { bf16_weights_version_ = weights_version_; }
  bool bf16_weights_current() const { return bf16_weights_version_ == weights_version_; }
  // Notes the kernel one pass of an op runs ("conv fwd" and a primitive's
  // impl_info_str(), or xrun's own), counted into the environment's
  // onednn_kernels field: what ran, stored with the run.
  void note_kernel(const std::string& pass, const std::string& impl) { ++kernels_[pass][impl]; }
  // GPT-2's attention keeps each layer's probabilities [B, H, T, T] between
  // the passes up to this size, and recomputes them beyond it (tests lower it).
  int64_t attention_keep_bytes = int64_t{64} << 20;

 private:
  char* allocate_region(size_t bytes);
  int64_t bf16_weights_bytes() const;  // 0 unless asked for
  // Reorders between a layout and the canonical one, made once per layout.
  dnnl::reorder& exchange_reorder(const memory::desc& md, bool to_canonical);

  int threads_;
  Precision precision_;
  std::string bf16_kernels_;  // bf16_kernels_for_isa of oneDNN's ISA here
  memory::data_type act_type_;
  bool nhwc_activations_ = false;  // bf16 on AMX
  uint64_t weights_version_ = 1;
  bool need_bf16_weights_ = false;
  uint16_t* bf16_weights_ = nullptr;
  uint64_t bf16_weights_version_ = 0;  // the weights_version() the optimizer last wrote it at
  std::map<std::string, std::map<std::string, int>> kernels_;  // pass -> impl -> ops
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::deque<CpuTensor> tensors_;  // stable addresses
  MemoryPlan plan_{64};
  size_t scratchpad_bytes_ = 0;
  size_t op_scratch_bytes_ = 0;
  char* op_scratch_base_ = nullptr;
  memory scratchpad_;
  char* scratchpad_base_ = nullptr;
  std::vector<CpuOp*> ops_;
  std::vector<std::tuple<memory::desc, bool, dnnl::reorder>> exchange_reorders_;
  std::unique_ptr<PointwiseOps> pointwise_;
  CpuTensor* input_ = nullptr;
  CpuTensor* labels_ = nullptr;
  CpuTensor* tokens_ = nullptr;  // GPT-2's token input
  std::map<std::string, CpuTensor*> shared_scratch_;
  int64_t allocated_bytes_ = 0;
  std::vector<char*> allocations_;

  friend class CpuLoss;
};

// Memory descriptor helpers.
memory::desc plain_md(const memory::dims& dims, memory::data_type dt = memory::data_type::f32);
memory::desc any_md(const memory::dims& dims, memory::data_type dt = memory::data_type::f32);
// The DType of a oneDNN data type (f32, bf16, s32, u8).
DType dtype_of(memory::data_type dt);
// Does `md` keep elements in canonical (row-major, unpadded) order?
bool is_plain(const memory::desc& md);

// dst[i] += src[i] (pointwise.cpp), vectorised for the machine; the bf16
// form adds in fp32 and rounds to nearest even.
void add_floats(float* dst, const float* src, int64_t n);
void add_bf16(uint16_t* dst, const uint16_t* src, int64_t n);

// Op factories, one per file.
std::unique_ptr<ConvOp> make_conv(CpuBackend& be, const std::string& name, const ConvShape& shape,
                                  CpuTensor* x, CpuTensor* dx);
// The small-output convolution in bf16 (conv_gemm_bf16.cpp), for NHWC bf16 x.
bool is_gemm_conv_bf16_input(const CpuTensor* x);
std::unique_ptr<ConvOp> make_conv_gemm_bf16(CpuBackend& be, const std::string& name,
                                            const ConvShape& shape, CpuTensor* x, CpuTensor* dx);
std::unique_ptr<BatchNormOp> make_batch_norm(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, BnActivation act,
                                             CpuTensor* residual, CpuTensor* d_residual);
std::unique_ptr<PoolOp> make_max_pool(CpuBackend& be, const std::string& name, CpuTensor* x,
                                      CpuTensor* dx, int64_t kernel, int64_t stride, int64_t pad);
std::unique_ptr<PoolOp> make_global_avg_pool(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx);
std::unique_ptr<LinearOp> make_linear(CpuBackend& be, const std::string& name, CpuTensor* x,
                                      CpuTensor* dx, int64_t out_features);
std::unique_ptr<LossOp> make_softmax_cross_entropy(CpuBackend& be, CpuTensor* logits,
                                                   CpuTensor* dlogits, CpuTensor* labels);
std::unique_ptr<PointwiseOps> make_pointwise(CpuBackend& be);
// GPT-2's families: matmul.cpp, layer_norm.cpp, attention.cpp, gpt2_pointwise.cpp.
std::unique_ptr<LinearOp> make_linear_in_out(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, int64_t out_features);
std::unique_ptr<LinearOp> make_linear_tied(CpuBackend& be, const std::string& name, CpuTensor* x,
                                           CpuTensor* dx, Tensor* weight, Tensor* weight_grad);
std::unique_ptr<LayerNormOp> make_layer_norm(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, bool add_to_dx);
std::unique_ptr<ActivationOp> make_causal_attention(CpuBackend& be, const std::string& name,
                                                    CpuTensor* qkv, CpuTensor* dqkv,
                                                    int64_t batch, int64_t heads);
std::unique_ptr<EmbeddingOp> make_embedding(CpuBackend& be, const std::string& wte_name,
                                            const std::string& wpe_name, CpuTensor* tokens,
                                            int64_t vocab, int64_t context, int64_t width);
std::unique_ptr<ActivationOp> make_gelu(CpuBackend& be, const std::string& name, CpuTensor* x,
                                        CpuTensor* dx);
std::unique_ptr<ResidualAddOp> make_residual_add(CpuBackend& be, const std::string& name,
                                                 CpuTensor* a, CpuTensor* da, CpuTensor* b,
                                                 CpuTensor* db);
std::unique_ptr<OptimizerOp> make_optimizer(CpuBackend& be, const OptimizerSettings& settings,
                                            bool accumulation);

}  // namespace xrun::cpu
