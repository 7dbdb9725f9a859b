// tests/cuda/nccl_test.cpp: NCCL on the one GPU a check machine has: a
// one-rank communicator sums device and host memory in place (a sum over
// one rank is the value itself), and a CUDA run joined through it trains
// the weights of a run without it in fp32 and fp16 (the gradients NCCL sums
// are the fp32 region with the half mirror folded in: g32 + float(g16)
// either way, so bit for bit where cuDNN's algorithms are deterministic;
// otherwise no further from the plain run than a second plain run is). Several ranks need several GPUs: unverified
// until such a machine runs `xrun run` with train.ranks > 1.
#include "catch2_compat.h"

#ifdef XRUN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <filesystem>
#include <numeric>
#include <vector>

#include "core/run_observer.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/device/nccl_api.h"
#include "engine/distributed/communicator.h"
#include "engine/trainer.h"
#include "skip.h"

using namespace xrun;

namespace {

std::unique_ptr<dist::Communicator> one_rank_nccl() {
  bool ok = false;
  const std::string lib = xrun::nccl_library(&ok);
  if (!ok) return nullptr;
  return dist::connect_nccl(dist::RankInfo{}, 0);
}

RunConfig small_cuda_run(Precision precision, const std::string& checkpoint) {
  RunConfig cfg;
  cfg.name = "nccl";
  cfg.model.arch = "resnet18";
  cfg.data.source = "synthetic";
  cfg.data.image_size = 16;
  cfg.data.samples = 64;
  cfg.data.test_samples = 16;
  cfg.data.mean = {0.5f, 0.5f, 0.5f};
  cfg.data.std = {0.25f, 0.25f, 0.25f};
  cfg.data.workers = 0;
  cfg.train.device = Device::parse("cuda:0");
  cfg.train.batch_size = 8;
  cfg.train.steps = 3;
  cfg.train.eval = false;
  cfg.train.precision = precision;
  cfg.train.checkpoint = checkpoint;
  cfg.train.log_every = 1;
  cfg.measure.warmup_steps = 1;
  cfg.distributed.bucket_mb = 0;
  return cfg;
}

std::map<std::string, std::vector<float>> floats(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : SafetensorsFile::open(path).entries())
    if (e.dtype == "F32") out[e.name] = e.to_vector<float>();
  return out;
}

}  // namespace

// Calls the CUDA runtime itself: only where the build has CUDA (test_cuda
// is built everywhere, and skips as a whole without a GPU).
#ifdef XRUN_HAVE_CUDA
TEST_CASE("nccl: one rank sums device and host memory in place", "[cuda][nccl]") {
  bool ok = false;
  const std::string lib = xrun::nccl_library(&ok);
  if (!ok) XRUN_SKIP("NCCL cannot be loaded: " << lib);
  INFO(lib);
  const auto comm = one_rank_nccl();
  REQUIRE(comm);
  CHECK(comm->backend() == "nccl");
  CHECK(comm->sums_device_memory());
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), -3.5f);
  float* dev = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  comm->all_reduce_sum_device(dev, host.size(), nullptr);
  std::vector<float> back(host.size());
  REQUIRE(cudaMemcpy(back.data(), dev, back.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  cudaFree(dev);
  CHECK(back == host);
  double totals[3] = {1.25, -2.5, 1e300};
  comm->all_reduce_sum(totals, 3);
  CHECK(totals[0] == 1.25);
  CHECK(totals[1] == -2.5);
  CHECK(totals[2] == 1e300);
  comm->barrier();
}
#endif

TEST_CASE("nccl: a CUDA run joined through one NCCL rank trains the same weights",
          "[cuda][nccl]") {
  bool ok = false;
  const std::string lib = xrun::nccl_library(&ok);
  if (!ok) XRUN_SKIP("NCCL cannot be loaded: " << lib);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xrun-nccl-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const Precision precision : {Precision::fp32, Precision::fp16}) {
    INFO((precision == Precision::fp16 ? "fp16" : "fp32"));
    const std::string plain_file = (dir / "plain.safetensors").string();
    const std::string again_file = (dir / "again.safetensors").string();
    const std::string joined_file = (dir / "joined.safetensors").string();
    RunObservers none;
    train(small_cuda_run(precision, plain_file), none);
    train(small_cuda_run(precision, again_file), none);
    // bucket_mb = 0: one sum after the backward pass; 1: about 45 buckets
    // of resnet18's 11.2 M gradients, each folded and summed on NCCL's
    // stream during the backward pass.
    for (const double bucket_mb : {0.0, 1.0}) {
    INFO("bucket_mb " << bucket_mb);
    const auto comm = one_rank_nccl();
    REQUIRE(comm);
    TrainContext context;
    context.comm = comm.get();
    RunConfig joined = small_cuda_run(precision, joined_file);
    joined.distributed.backend = "nccl";
    joined.distributed.bucket_mb = bucket_mb;
    const TrainResult r = train(joined, none, context);
    CHECK(r.summary.ranks == 1);
    const auto a = floats(plain_file), again = floats(again_file), b = floats(joined_file);
    REQUIRE(a.size() == b.size());
    int compared = 0;
    const auto max_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
      double d = x.size() == y.size() ? 0 : 1e30;
      for (size_t i = 0; i < x.size() && i < y.size(); ++i)
        d = std::max(d, std::abs(double(x[i]) - double(y[i])));
      return d;
    };
    for (const auto& [name, values] : a) {
      INFO(name);
      REQUIRE(b.count(name));
      const double run_to_run = max_diff(values, again.at(name));
      const double joined_diff = max_diff(values, b.at(name));
      INFO("plain vs plain " << run_to_run << ", plain vs joined " << joined_diff);
      CHECK(joined_diff <= 2 * run_to_run);  // 0 where the plain runs agree to the bit
      ++compared;
    }
    CHECK(compared > 60);
    }
  }
  std::filesystem::remove_all(dir);
}
