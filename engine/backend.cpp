// engine/backend.cpp: make_backend, the one place a device string becomes a
// backend, with the checks that must fail before any work starts; and the
// Backend defaults.
#include "engine/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"
#include "engine/device/device_info.h"
#ifdef XRUN_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace xrun {

void* Backend::allocate_host(size_t bytes, bool) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void Backend::free_host(void* p, bool) { std::free(p); }

void OptimizerOp::exclude_from_decay(std::span<Tensor* const> params) {
  if (!params.empty())
    throw std::runtime_error("this backend's optimizer decays every parameter (no per-parameter "
                             "weight decay yet)");
}

std::vector<std::pair<int64_t, int64_t>> parameter_ranges(std::span<Tensor* const> params) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Tensor* t : params) {
    if (t->role != TensorRole::parameter)
      throw std::invalid_argument(t->name + " is not a parameter");
    out.push_back({static_cast<int64_t>(t->offset / sizeof(float)),
                   static_cast<int64_t>(t->bytes / sizeof(float))});
  }
  std::sort(out.begin(), out.end());
  return out;
}

void OptimizerOp::clip_grad_norm(double limit, float grad_scale) {
  const std::span<float> g = host_gradients();
  if (g.empty()) throw std::logic_error("clip_grad_norm: this optimizer's gradients are not in host memory");
  const double inv_scale = 1.0 / grad_scale;
  double sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = g[i] * inv_scale;
    sum += v * v;
  }
  const double norm = std::sqrt(sum);
  if (!(norm > limit)) return;
  const auto factor = static_cast<float>(limit / (norm + 1e-6));
#pragma omp parallel for
  for (size_t i = 0; i < g.size(); ++i) g[i] *= factor;
}

void OptimizerOp::apply_to(std::span<Tensor* const>) {
  throw std::logic_error("this backend's optimizer updates all parameters at once (per_layer() is false)");
}


namespace {
[[noreturn]] void no_transformer_ops(const Backend& b, const std::string& what) {
  throw std::runtime_error("the " + b.name() + " backend has no GPT-2 ops yet (" + what +
                           "): train model.arch = \"gpt2\" on device = \"cpu\"");
}
}  // namespace

Tensor* Backend::token_input(int64_t, int64_t) { no_transformer_ops(*this, "token input"); }
std::unique_ptr<EmbeddingOp> Backend::embedding(const std::string&, const std::string&, Tensor*,
                                                int64_t, int64_t, int64_t) {
  no_transformer_ops(*this, "embedding");
}
std::unique_ptr<LayerNormOp> Backend::layer_norm(const std::string&, Tensor*, Tensor*, bool) {
  no_transformer_ops(*this, "layer norm");
}
std::unique_ptr<LinearOp> Backend::linear_in_out(const std::string&, Tensor*, Tensor*, int64_t) {
  no_transformer_ops(*this, "linear");
}
std::unique_ptr<LinearOp> Backend::linear_tied(const std::string&, Tensor*, Tensor*, Tensor*,
                                               Tensor*) {
  no_transformer_ops(*this, "tied linear");
}
std::unique_ptr<ActivationOp> Backend::causal_attention(const std::string&, Tensor*, Tensor*,
                                                        int64_t, int64_t) {
  no_transformer_ops(*this, "attention");
}
std::unique_ptr<ActivationOp> Backend::gelu(const std::string&, Tensor*, Tensor*) {
  no_transformer_ops(*this, "GELU");
}
std::unique_ptr<ResidualAddOp> Backend::residual_add(const std::string&, Tensor*, Tensor*,
                                                     Tensor*, Tensor*) {
  no_transformer_ops(*this, "residual add");
}
void Backend::load_tokens(const int32_t*, const int32_t*, int) {
  no_transformer_ops(*this, "token batches");
}

bool cuda_engine_available() {
#ifdef XRUN_HAVE_CUDA
  const CudaInfo info = query_cuda();
  for (const GpuInfo& gpu : info.gpus)
    if (gpu.kernels_supported) return true;
#endif
  return false;
}

std::string gpu_unusable_reason() {
  const CudaInfo info = query_cuda();  // in a build without CUDA: NVML's driver release only
  // A GPU is present: the driver's NVML answers, CUDA lists one, or the
  // kernel module lists one.
  std::error_code ec;
  bool present = !info.driver_release.empty() || !info.gpus.empty();
  if (!present)
    for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      (void)e;
      present = true;
      break;
    }
  if (!present) return "";
  if (!info.compiled_with_cuda)
    return "this xrun was built without the CUDA engine (no CUDA toolkit when it was built): "
           "rebuild it where the toolkit is installed (README, \"On a GPU\")";
  if (const std::string advice =
          driver_advice(info.runtime_version, info.driver_version, info.driver_release);
      !advice.empty())
    return advice;
  for (const GpuInfo& gpu : info.gpus)
    if (gpu.kernels_supported) return "";
  if (!info.gpus.empty())
    return "this build has no kernels for " + info.gpus.front().name + " (compute capability " +
           std::to_string(info.gpus.front().cc_major) + "." + std::to_string(info.gpus.front().cc_minor) +
           "; built for " + info.cuda_architectures + "): rebuild with CMAKE_CUDA_ARCHITECTURES naming it";
  return "the NVIDIA driver is present but CUDA sees no usable GPU (" + info.status + ")";
}

int64_t device_memory_bytes(const std::string& device) {
#ifdef XRUN_HAVE_CUDA
  if (device.rfind("cuda:", 0) == 0) {
    const CudaInfo info = query_cuda();
    for (const GpuInfo& gpu : info.gpus)
      if ("cuda:" + std::to_string(gpu.index) == device) return gpu.memory_bytes;
  }
#endif
  return 0;
}

std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options) {
  if (device == "cpu")  // refuses a precision this CPU cannot train in
    return std::make_unique<cpu::CpuBackend>(options.threads, options.precision);
  if (device.rfind("cuda:", 0) == 0) {
    int index = -1;
    try {
      index = std::stoi(device.substr(5));
    } catch (const std::exception&) {
    }
    if (index < 0) throw std::runtime_error("device '" + device + "': expected cuda:N");
#ifdef XRUN_HAVE_CUDA
    return std::make_unique<cuda::CudaBackend>(index, options);
#else
    throw std::runtime_error("device " + device +
                             ": this xrun was built without CUDA (XRUN_CUDA=OFF or no toolkit)");
#endif
  }
  throw std::runtime_error("unknown device '" + device + "' (cpu, cuda:N)");
}

}  // namespace xrun
