// engine/device/nccl_none.cpp: nccl_library() in a build without NCCL's
// header (no CUDA toolkit, or one without nccl.h).
#include "engine/device/nccl_api.h"

namespace xrun {

std::string nccl_library(bool* ok) {
  if (ok) *ok = false;
  return "this xrun was built without NCCL (no CUDA toolkit with nccl.h at build time)";
}

}  // namespace xrun
