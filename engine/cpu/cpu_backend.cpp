// engine/cpu/cpu_backend.cpp: the CPU backend's memory plan (declare ->
// allocate: one zeroed allocation per region), canonical <-> oneDNN layout
// exchange by reorders (fp32 canonical values <-> f32 or bf16 tensors),
// batch loading and normalisation, and the precision check.
#include "engine/cpu/cpu_backend.h"

#include <omp.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/system_memory.h"
#include "engine/cpu/bf16.h"
#include "engine/device/device_info.h"
#include "engine/memory_plan.h"

namespace xrun::cpu {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

char* zeroed_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(kAlign, round_up(bytes));
  if (!p) throw std::runtime_error("cpu backend: out of memory allocating " +
                                   std::to_string(bytes) + " bytes");
  // Zeroed (and so touched: a plan the machine cannot hold fails here, not
  // mid-run) in 2 MiB pieces across the threads: the kernel's page faults
  // run in parallel.
  char* base = static_cast<char*>(p);
  const size_t n = round_up(bytes);
  constexpr size_t kPiece = size_t{2} << 20;
#pragma omp parallel for schedule(static) if (n > kPiece)
  for (size_t at = 0; at < n; at += kPiece) std::memset(base + at, 0, std::min(kPiece, n - at));
  return base;
}
}  // namespace

// ------------------------------------------------------------- helpers --

memory::desc plain_md(const memory::dims& dims, memory::data_type dt) {
  memory::dims strides(dims.size());
  memory::dim s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return memory::desc(dims, dt, strides);
}

memory::desc any_md(const memory::dims& dims, memory::data_type dt) {
  return memory::desc(dims, dt, memory::format_tag::any);
}

DType dtype_of(memory::data_type dt) {
  switch (dt) {
    case memory::data_type::f32: return DType::f32;
    case memory::data_type::bf16: return DType::bf16;
    case memory::data_type::f16: return DType::f16;
    case memory::data_type::s32: return DType::i32;
    case memory::data_type::u8: return DType::u8;
    default: throw std::logic_error("cpu backend: a tensor of an unexpected oneDNN data type");
  }
}

bool is_plain(const memory::desc& md) {
  return md == plain_md(dnnl_compat::dims_of(md), dnnl_compat::data_type_of(md));
}

void Reorder::make(const dnnl::engine& eng, const memory::desc& from, const memory::desc& to,
                   bool even_if_same) {
  needed = even_if_same || !(from == to);
  if (needed) prim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, from, eng, to));
}
void Reorder::bind(const memory& from, const memory& to) {
  args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
}
void Reorder::run(dnnl::stream& s) {
  if (needed) prim.execute(s, args);
}

// ------------------------------------------------------------- backend --

namespace {
// The activation type of a precision on a CPU whose oneDNN has `bf16_kernels`
// (bf16_kernels_for_isa: "amx", "avx512_bf16" or ""), or why it cannot train
// in it.
memory::data_type activation_type_for(Precision p, const std::string& bf16_kernels) {
  if (p == Precision::fp32) return memory::data_type::f32;
  if (p != Precision::bf16)
    throw std::runtime_error(std::string("precision '") + to_string(p) +
                             "' needs a CUDA device; the CPU engine trains in fp32 and bf16");
  if (bf16_kernels.empty()) throw std::runtime_error(cpu_bf16_refusal(query_cpu().onednn_isa));
  return memory::data_type::bf16;
}

std::string this_cpu_bf16_kernels() {
  return bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
}
}  // namespace

CpuBackend::CpuBackend(int threads, Precision precision)
    : threads_(threads > 0 ? threads : omp_get_num_procs()),
      precision_(precision),
      bf16_kernels_(this_cpu_bf16_kernels()),
      act_type_(activation_type_for(precision, bf16_kernels_)),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {
  omp_set_num_threads(threads_);
  nhwc_activations_ = precision == Precision::bf16 && bf16_kernels_ == "amx";
  pointwise_ = make_pointwise(*this);
}

CpuBackend::~CpuBackend() {
  for (char* p : allocations_) std::free(p);
}

Environment CpuBackend::environment() const {
  Environment env = collect_environment("cpu");
  env.fields["cpu_threads"] = std::to_string(threads_);
  // "conv fwd: brg_conv_fwd:avx512_core_amx x40, matmul brg:avx512_core_amx x13; ..."
  std::string kernels;
  for (const auto& [pass, impls] : kernels_) {
    kernels += (kernels.empty() ? "" : "; ") + pass + ":";
    const char* sep = " ";
    for (const auto& [impl, ops] : impls) {
      kernels += sep + impl + " x" + std::to_string(ops);
      sep = ", ";
    }
  }
  if (!kernels.empty()) env.fields["onednn_kernels"] = kernels;
  return env;
}

dnnl::primitive_attr CpuBackend::attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // fp32 means fp32: oneDNN's default math mode (ONEDNN_DEFAULT_FPMATH_MODE,
  // dnnl_set_default_fpmath_mode) could otherwise let convolutions and inner
  // products compute in bf16 on CPUs that have it, changing what a run means.
  a.set_fpmath_mode(dnnl::fpmath_mode::strict);
  return a;
}

memory::desc CpuBackend::activation_md(const memory::dims& dims) const {
  if (nhwc_activations_) return memory::desc(dims, act_type_, memory::format_tag::nhwc);
  return any_md(dims, act_type_);
}

CpuTensor* CpuBackend::declare(const std::string& name, std::vector<int64_t> dims,
                               const memory::desc& md, TensorRole role,
                               std::optional<DType> dtype) {
  CpuTensor& t = tensors_.emplace_back();
  t.name = name;
  t.dims = std::move(dims);
  t.dtype = dtype ? *dtype : dtype_of(dnnl_compat::data_type_of(md));
  t.role = role;
  t.md = md;
  t.bytes = md.get_size();
  t.offset = plan_.place(role, t.bytes);
  return &t;
}

std::pair<CpuTensor*, CpuTensor*> CpuBackend::declare_parameter(const std::string& name,
                                                                std::vector<int64_t> dims,
                                                                const memory::desc& md) {
  CpuTensor* p = declare(name, dims, md, TensorRole::parameter);
  CpuTensor* g = declare(name + ".grad", dims, md, TensorRole::gradient);
  if (p->offset != g->offset) throw std::logic_error("parameter and gradient regions diverged");
  return {p, g};
}

void CpuBackend::need_scratchpad(const memory::desc& md) {
  scratchpad_bytes_ = std::max(scratchpad_bytes_, md.get_size());
}

CpuTensor* CpuBackend::shared_scratch(const std::string& key, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  auto it = shared_scratch_.find(key);
  if (it == shared_scratch_.end())
    it = shared_scratch_.emplace(key, declare(key, dims, plain_md(dims), TensorRole::workspace)).first;
  if (it->second->numel() < n)
    throw std::logic_error("shared scratch " + key + ": asked for more than its first user");
  return it->second;
}

Tensor* CpuBackend::tensor_like(const Tensor* like, const std::string& name, TensorRole role) {
  return declare(name, like->dims, as_cpu(like)->md, role, like->dtype);
}

Tensor* CpuBackend::input(int64_t n, int64_t c, int64_t h, int64_t w) {
  if (input_) throw std::logic_error("cpu backend: input() called twice");
  const memory::desc md = nhwc_activations_
                              ? memory::desc({n, c, h, w}, act_type_, memory::format_tag::nhwc)
                              : plain_md({n, c, h, w}, act_type_);
  input_ = declare("input", {n, c, h, w}, md, TensorRole::io);
  return input_;
}

std::unique_ptr<ConvOp> CpuBackend::conv(const std::string& name, const ConvShape& shape,
                                         Tensor* x, Tensor* dx) {
  auto op = make_conv(*this, name, shape, as_cpu(x), as_cpu(dx));
  return op;
}

std::unique_ptr<BatchNormOp> CpuBackend::batch_norm(const std::string& name, Tensor* x,
                                                    Tensor* dx, BnActivation act,
                                                    Tensor* residual, Tensor* d_residual) {
  return make_batch_norm(*this, name, as_cpu(x), as_cpu(dx), act, as_cpu(residual),
                         as_cpu(d_residual));
}

std::unique_ptr<PoolOp> CpuBackend::max_pool(const std::string& name, Tensor* x, Tensor* dx,
                                             int64_t kernel, int64_t stride, int64_t pad) {
  return make_max_pool(*this, name, as_cpu(x), as_cpu(dx), kernel, stride, pad);
}

std::unique_ptr<PoolOp> CpuBackend::global_avg_pool(const std::string& name, Tensor* x,
                                                    Tensor* dx) {
  return make_global_avg_pool(*this, name, as_cpu(x), as_cpu(dx));
}

std::unique_ptr<LinearOp> CpuBackend::linear(const std::string& name, Tensor* x, Tensor* dx,
                                             int64_t out_features) {
  return make_linear(*this, name, as_cpu(x), as_cpu(dx), out_features);
}

std::unique_ptr<LossOp> CpuBackend::softmax_cross_entropy(Tensor* logits, Tensor* dlogits) {
  if (labels_) throw std::logic_error("cpu backend: one loss per model");
  const int64_t n = logits->dims[0];
  labels_ = declare("labels", {n}, plain_md({n}, memory::data_type::s32), TensorRole::io,
                    DType::i32);
  return make_softmax_cross_entropy(*this, as_cpu(logits), as_cpu(dlogits), labels_);
}

PointwiseOps& CpuBackend::pointwise() { return *pointwise_; }

Tensor* CpuBackend::token_input(int64_t batch, int64_t tokens_per_row) {
  if (tokens_ || input_) throw std::logic_error("cpu backend: one model input");
  tokens_ = declare("tokens", {batch, tokens_per_row},
                    plain_md({batch, tokens_per_row}, memory::data_type::s32), TensorRole::io,
                    DType::i32);
  return tokens_;
}

std::unique_ptr<EmbeddingOp> CpuBackend::embedding(const std::string& wte_name,
                                                   const std::string& wpe_name, Tensor* tokens,
                                                   int64_t vocab, int64_t context, int64_t width) {
  return make_embedding(*this, wte_name, wpe_name, as_cpu(tokens), vocab, context, width);
}

std::unique_ptr<LayerNormOp> CpuBackend::layer_norm(const std::string& name, Tensor* x,
                                                    Tensor* dx, bool add_to_dx) {
  return make_layer_norm(*this, name, as_cpu(x), as_cpu(dx), add_to_dx);
}

std::unique_ptr<LinearOp> CpuBackend::linear_in_out(const std::string& name, Tensor* x,
                                                    Tensor* dx, int64_t out_features) {
  return make_linear_in_out(*this, name, as_cpu(x), as_cpu(dx), out_features);
}

std::unique_ptr<LinearOp> CpuBackend::linear_tied(const std::string& name, Tensor* x, Tensor* dx,
                                                  Tensor* weight, Tensor* weight_grad) {
  return make_linear_tied(*this, name, as_cpu(x), as_cpu(dx), weight, weight_grad);
}

std::unique_ptr<ActivationOp> CpuBackend::causal_attention(const std::string& name, Tensor* qkv,
                                                           Tensor* dqkv, int64_t batch,
                                                           int64_t heads) {
  return make_causal_attention(*this, name, as_cpu(qkv), as_cpu(dqkv), batch, heads);
}

std::unique_ptr<ActivationOp> CpuBackend::gelu(const std::string& name, Tensor* x, Tensor* dx) {
  return make_gelu(*this, name, as_cpu(x), as_cpu(dx));
}

std::unique_ptr<ResidualAddOp> CpuBackend::residual_add(const std::string& name, Tensor* a,
                                                        Tensor* da, Tensor* b, Tensor* db) {
  return make_residual_add(*this, name, as_cpu(a), as_cpu(da), as_cpu(b), as_cpu(db));
}

void CpuBackend::load_tokens(const int32_t* tokens, const int32_t* targets, int rows) {
  if (!tokens_ || !labels_) throw std::logic_error("load_tokens: model has no token input or loss");
  const int64_t batch = tokens_->dims[0], t = tokens_->dims[1];
  if (rows < 0 || rows > batch) throw std::invalid_argument("load_tokens: batch larger than the plan");
  const size_t used = static_cast<size_t>(rows * t) * sizeof(int32_t);
  for (auto [dst, src] : {std::pair{tokens_, tokens}, std::pair{labels_, targets}}) {
    std::memcpy(dst->data, src, used);
    std::memset(static_cast<char*>(dst->data) + used, 0, dst->bytes - used);
  }
}

std::unique_ptr<OptimizerOp> CpuBackend::optimizer(const OptimizerSettings& settings,
                                                   bool accumulation) {
  return make_optimizer(*this, settings, accumulation);
}

float* CpuBackend::region(TensorRole role) { return reinterpret_cast<float*>(plan_.base(role)); }
size_t CpuBackend::region_bytes(TensorRole role) const { return plan_.region_bytes(role); }

void CpuBackend::declare_mirror(const std::string& name) { plan_.add_mirror(name); }

float* CpuBackend::mirror_region(const std::string& name) {
  return reinterpret_cast<float*>(plan_.mirror_base(name));
}

std::vector<MemoryRecord> CpuBackend::memory_plan() const {
  std::vector<MemoryRecord> extras = {{"scratchpad", static_cast<int64_t>(scratchpad_bytes_)}};
  if (op_scratch_bytes_) extras.push_back({"op_scratch", static_cast<int64_t>(op_scratch_bytes_)});
  if (need_bf16_weights_) extras.push_back({"bf16_weights", bf16_weights_bytes()});
  return plan_.records(extras);
}

int64_t CpuBackend::bf16_weights_bytes() const {
  return need_bf16_weights_ ? static_cast<int64_t>(region_bytes(TensorRole::parameter) / 2) : 0;
}

// One zeroed allocation of `bytes` (none for 0), counted and kept for the destructor.
char* CpuBackend::allocate_region(size_t bytes) {
  char* base = zeroed_alloc(bytes);
  if (base) allocations_.push_back(base);
  allocated_bytes_ += static_cast<int64_t>(bytes);
  return base;
}

void CpuBackend::allocate() {
  if (plan_.bound()) throw std::logic_error("cpu backend: allocate() called twice");
  // Refuses a plan larger than the memory available, naming the largest
  // batch that fits.
  if (const int64_t available = available_memory_bytes(); available > 0)
    plan_.check_fits({{"scratchpad", static_cast<int64_t>(scratchpad_bytes_)},
                      {"op_scratch", static_cast<int64_t>(op_scratch_bytes_)},
                      {"bf16_weights", bf16_weights_bytes()}},
                     input_ ? input_->dims[0] : tokens_ ? tokens_->dims[0] : 1, available,
                     "in memory");
  for (const auto& entry : plan_.mirrors())
    plan_.set_mirror_base(entry.first, allocate_region(region_bytes(TensorRole::parameter)));
  for (size_t i = 0; i < 7; ++i) {
    const TensorRole role = static_cast<TensorRole>(i);
    plan_.set_base(role, allocate_region(region_bytes(role)));
  }
  plan_.mark_bound();
  scratchpad_base_ = zeroed_alloc(std::max<size_t>(scratchpad_bytes_, kAlign));
  allocations_.push_back(scratchpad_base_);
  allocated_bytes_ += static_cast<int64_t>(scratchpad_bytes_);
  scratchpad_ = memory(memory::desc({static_cast<memory::dim>(std::max<size_t>(
                                         scratchpad_bytes_, kAlign))},
                                    memory::data_type::u8, memory::format_tag::a),
                       engine_, scratchpad_base_);
  op_scratch_base_ = allocate_region(op_scratch_bytes_);
  bf16_weights_ = reinterpret_cast<uint16_t*>(allocate_region(bf16_weights_bytes()));
  for (CpuTensor& t : tensors_) {
    t.data = plan_.base(t.role) + t.offset;
    t.mem = memory(t.md, engine_, t.data);
  }
  for (CpuOp* op : ops_) op->bind();
}

int64_t CpuBackend::peak_memory_bytes() const {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // peak resident set of the process
}

// ------------------------------------------------------ canonical data --

// The canonical form of a tensor's values: row-major, f32 for f32 and bf16
// tensors (write() and read() convert), the tensor's own type otherwise.
memory::desc canonical_md(const memory::desc& md) {
  const memory::data_type dt = dnnl_compat::data_type_of(md);
  return plain_md(dnnl_compat::dims_of(md),
                  dt == memory::data_type::bf16 ? memory::data_type::f32 : dt);
}

dnnl::reorder& CpuBackend::exchange_reorder(const memory::desc& md, bool to_canonical) {
  for (auto& [desc, dir, prim] : exchange_reorders_)
    if (dir == to_canonical && desc == md) return prim;
  const memory::desc plain = canonical_md(md);
  auto pd = to_canonical ? dnnl::reorder::primitive_desc(engine_, md, engine_, plain)
                         : dnnl::reorder::primitive_desc(engine_, plain, engine_, md);
  exchange_reorders_.emplace_back(md, to_canonical, dnnl::reorder(pd));
  return std::get<2>(exchange_reorders_.back());
}

void CpuBackend::write(Tensor* t, std::span<const float> canonical) {
  CpuTensor* ct = as_cpu(t);
  if (static_cast<int64_t>(canonical.size()) != t->numel())
    throw std::invalid_argument("write " + t->name + ": " + std::to_string(canonical.size()) +
                                " values for " + std::to_string(t->numel()) + " elements");
  if (!ct->data) throw std::logic_error("write before allocate(): " + t->name);
  if (t->role == TensorRole::parameter) weights_changed();
  if (ct->md == canonical_md(ct->md)) {
    std::memcpy(ct->data, canonical.data(), canonical.size_bytes());
    return;
  }
  memory user(canonical_md(ct->md), engine_, const_cast<float*>(canonical.data()));
  exchange_reorder(ct->md, false).execute(stream_, user, ct->mem);
  stream_.wait();
}

void CpuBackend::read(const Tensor* t, std::span<float> canonical) {
  const CpuTensor* ct = as_cpu(t);
  if (static_cast<int64_t>(canonical.size()) != t->numel())
    throw std::invalid_argument("read " + t->name + ": room for " +
                                std::to_string(canonical.size()) + " values, tensor has " +
                                std::to_string(t->numel()));
  if (!ct->data) throw std::logic_error("read before allocate(): " + t->name);
  if (ct->md == canonical_md(ct->md)) {
    std::memcpy(canonical.data(), ct->data, canonical.size_bytes());
    return;
  }
  memory user(canonical_md(ct->md), engine_, canonical.data());
  exchange_reorder(ct->md, true).execute(stream_, const_cast<memory&>(ct->mem), user);
  stream_.wait();
}

void CpuBackend::write_labels(std::span<const int32_t> labels) {
  if (!labels_) throw std::logic_error("write_labels: model has no loss");
  if (static_cast<int64_t>(labels.size()) != labels_->dims[0])
    throw std::invalid_argument("write_labels: " + std::to_string(labels.size()) +
                                " labels for a batch of " + std::to_string(labels_->dims[0]));
  std::memcpy(labels_->data, labels.data(), labels.size_bytes());
}

void CpuBackend::load_batch(const uint8_t* images, const int32_t* labels, int count,
                            std::span<const float> mean, std::span<const float> std,
                            const BatchAugment* augment) {
  if (!input_ || !labels_) throw std::logic_error("load_batch: model has no input or loss");
  if (augment) throw std::logic_error("load_batch: the CPU backend's loader augments on the host");
  const int64_t n = input_->dims[0], c = input_->dims[1];
  const int64_t hw = input_->dims[2] * input_->dims[3];
  if (count > n) throw std::invalid_argument("load_batch: batch larger than the plan");
  if (static_cast<int64_t>(mean.size()) != c || static_cast<int64_t>(std.size()) != c)
    throw std::invalid_argument("load_batch: mean/std need one value per channel");
  const bool bf16 = input_->dtype == DType::bf16;
  // Per channel: x = (pixel/255 - mean) / std  =  pixel * a + b.
  constexpr int64_t kMaxChannels = 16;
  if (c > kMaxChannels) throw std::invalid_argument("load_batch: at most 16 image channels");
  float a[kMaxChannels], b[kMaxChannels];
  for (int64_t ch = 0; ch < c; ++ch) {
    a[ch] = 1.0f / (255.0f * std[ch]);
    b[ch] = -mean[ch] / std[ch];
  }
  const size_t elem = bf16 ? sizeof(bf16_t) : sizeof(float);
  if (nhwc_activations_) {  // bf16, pixel-major: x[i][p][ch]
    bf16_t* out = static_cast<bf16_t*>(input_->data);
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < c; ++ch)
          out[(i * hw + p) * c + ch] =
              i < count ? float_to_bf16(images[(i * c + ch) * hw + p] * a[ch] + b[ch]) : 0;
  } else {
#pragma omp parallel for collapse(2)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t first = (i * c + ch) * hw;
      if (i >= count) {
        std::memset(static_cast<char*>(input_->data) + first * elem, 0, hw * elem);
        continue;
      }
      const uint8_t* in = images + first;
      if (bf16) {
        bf16_t* out = static_cast<bf16_t*>(input_->data) + first;
        for (int64_t p = 0; p < hw; ++p) out[p] = float_to_bf16(in[p] * a[ch] + b[ch]);
      } else {
        float* out = static_cast<float*>(input_->data) + first;
        for (int64_t p = 0; p < hw; ++p) out[p] = in[p] * a[ch] + b[ch];
      }
    }
  }
  int32_t* lab = static_cast<int32_t*>(labels_->data);
  for (int64_t i = 0; i < n; ++i) lab[i] = i < count ? labels[i] : 0;
}

}  // namespace xrun::cpu
