// engine/device/nccl_api.h: NCCL loaded at run time (libnccl.so.2 from the
// library path: the CUDA toolkit's, NVIDIA's libnccl2 package or the
// nvidia-nccl-cu13 wheel; else the file CMake found), so a machine without
// NCCL still trains one-rank CUDA runs and only a run that needs it says it
// is missing. The header's types come from nccl.h where the build found it
// (XRUN_HAVE_NCCL); nccl_library() is there in every build, for doctor.
#pragma once

#include <string>

#ifdef XRUN_HAVE_NCCL
#include <nccl.h>
#endif

namespace xrun {

// "libnccl.so.2 (NCCL 2.28.9)", or why NCCL cannot be used; `ok` says which.
// Loads the library on first call.
std::string nccl_library(bool* ok = nullptr);

#ifdef XRUN_HAVE_NCCL
// The functions xrun calls (NCCL 2.14 or newer: non-blocking communicators).
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommFinalize) finalize = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  std::string library;
  int version = 0;  // NCCL_VERSION_CODE of the loaded library: 22809
};

// The loaded API, or nullptr with why in `why_not`.
const NcclApi* nccl_api(std::string* why_not = nullptr);
#endif

}  // namespace xrun
