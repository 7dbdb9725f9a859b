// engine/device/nccl_api.cpp: see nccl_api.h.
#include "engine/device/nccl_api.h"

#include <vector>

#include "core/shared_library.h"

namespace xrun {

namespace {

struct Loaded {
  NcclApi api;
  std::string why_not;
};

Loaded load() {
  Loaded l;
  NcclApi& a = l.api;
  std::vector<std::string> names = {"libnccl.so.2"};
#ifdef XRUN_NCCL_LIBRARY
  names.push_back(XRUN_NCCL_LIBRARY);
#endif
  std::string tried;
  void* handle = open_first_library(names, a.library, tried);
  if (!handle) {
    l.why_not = "NCCL is not installed or not on the library path (" + tried +
                "): the CUDA toolkit's, NVIDIA's libnccl2 package or the nvidia-nccl-cu13 wheel";
    return l;
  }
  std::string missing;
  bind_symbol(handle, "ncclGetVersion", a.get_version, missing);
  bind_symbol(handle, "ncclGetUniqueId", a.get_unique_id, missing);
  bind_symbol(handle, "ncclCommInitRankConfig", a.init_rank_config, missing);
  bind_symbol(handle, "ncclCommGetAsyncError", a.get_async_error, missing);
  bind_symbol(handle, "ncclCommAbort", a.abort, missing);
  bind_symbol(handle, "ncclCommFinalize", a.finalize, missing);
  bind_symbol(handle, "ncclCommDestroy", a.destroy, missing);
  bind_symbol(handle, "ncclAllReduce", a.all_reduce, missing);
  bind_symbol(handle, "ncclGetErrorString", a.error_string, missing);
  bind_symbol(handle, "ncclGetLastError", a.last_error, missing);
  if (!missing.empty()) {
    l.why_not = a.library + " lacks " + missing + " (xrun needs NCCL 2.14 or newer)";
    return l;  // the handle stays open, as for CUPTI
  }
  if (a.get_version(&a.version) != ncclSuccess) a.version = 0;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

std::string version_text(int v) {  // 22809 -> "2.28.9"
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

const NcclApi* nccl_api(std::string* why_not) {
  const Loaded& l = loaded();
  if (!l.why_not.empty() && why_not) *why_not = l.why_not;
  return l.why_not.empty() ? &l.api : nullptr;
}

std::string nccl_library(bool* ok) {
  const Loaded& l = loaded();
  if (ok) *ok = l.why_not.empty();
  if (!l.why_not.empty()) return l.why_not;
  return l.api.library + (l.api.version ? " (NCCL " + version_text(l.api.version) + ")" : "");
}

}  // namespace xrun
