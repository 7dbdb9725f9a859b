// tests/engine/cuda_rules_test.cpp: rules of the CUDA engine that need no
// GPU to check: which cuDNN convolution candidates a run accepts and the
// math type it executes them with (engine/cuda/conv_rules.h), and that every
// kernel launch in engine/cuda/*.cu is followed by its launch check.
#include "catch2_compat.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifdef XRUN_HAVE_CUDA
#include "engine/cuda/conv_rules.h"

using namespace xrun;
using namespace xrun::cuda;

TEST_CASE("cuda conv rules: any successful candidate within the limit is usable", "[cuda_rules]") {
  CHECK(usable_candidate(CUDNN_STATUS_SUCCESS, 0, 0));
  CHECK(usable_candidate(CUDNN_STATUS_SUCCESS, 1024, 1024));
  CHECK_FALSE(usable_candidate(CUDNN_STATUS_SUCCESS, 1025, 1024));
  CHECK_FALSE(usable_candidate(CUDNN_STATUS_NOT_SUPPORTED, 0, 1024));
  CHECK_FALSE(usable_candidate(CUDNN_STATUS_ALLOC_FAILED, 0, 1024));
}

TEST_CASE("cuda conv rules: fp32 executes with FMA math whatever cuDNN reported", "[cuda_rules]") {
  // cuDNN 9 may report DEFAULT_MATH (which permits TF32 on sm_80+) for an
  // algorithm found under FMA math: an fp32 run must still run it with FMA.
  for (cudnnMathType_t reported : {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH, CUDNN_TENSOR_OP_MATH,
                                   CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION})
    CHECK(execution_math(Precision::fp32, reported) == CUDNN_FMA_MATH);
  CHECK(execution_math(Precision::tf32, CUDNN_DEFAULT_MATH) == CUDNN_DEFAULT_MATH);
  CHECK(execution_math(Precision::fp16, CUDNN_TENSOR_OP_MATH) == CUDNN_TENSOR_OP_MATH);
  CHECK(execution_math(Precision::bf16, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) ==
        CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}
#endif

TEST_CASE("cuda kernels: every <<<>>> launch is checked", "[cuda_rules]") {
  // A launch that fails (bad configuration, no kernel image for the card)
  // leaves the output untouched: without a check right after it the run
  // goes on with wrong numbers. The check must be the next statement.
  namespace fs = std::filesystem;
  int launches = 0;
  for (const auto& entry : fs::directory_iterator(std::string(XRUN_SOURCE_DIR) + "/engine/cuda")) {
    if (entry.path().extension() != ".cu") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string src = ss.str();
    for (size_t at = src.find("<<<"); at != std::string::npos; at = src.find("<<<", at + 3)) {
      ++launches;
      const size_t end = src.find(';', src.find(">>>", at));
      REQUIRE(end != std::string::npos);
      size_t next = src.find_first_not_of(" \t\n\\", end + 1);
      INFO(entry.path().filename().string() << ": the launch at offset " << at);
      CHECK(src.compare(next, 19, "XRUN_CHECK_LAUNCH()") == 0);
    }
  }
  CHECK(launches >= 10);  // layout, pointwise, loss and optimizer kernels
}
