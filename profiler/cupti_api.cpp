// profiler/cupti_api.cpp: see cupti_api.h. Tried in order: libcupti.so.N for
// the CUDA major version this build was compiled against (what the library
// path, the executable's run path or LD_LIBRARY_PATH offers: the toolkit's
// or PyTorch's nvidia-cuda-cupti wheel), then the file CMake found at
// configure time.
#include "profiler/cupti_api.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "core/shared_library.h"

namespace xrun::profiler {

namespace {

struct Loaded {
  CuptiApi api;
  bool ok = false;
  std::string why_not;
};

Loaded load() {
  Loaded l;
  std::vector<std::string> names = {"libcupti.so." + std::to_string(CUDART_VERSION / 1000)};
#ifdef XRUN_CUPTI_LIBRARY
  names.push_back(XRUN_CUPTI_LIBRARY);
#endif
  std::string tried;
  void* handle = open_first_library(names, l.api.library, tried);
  if (!handle) {
    l.why_not = "CUPTI is not installed or not on the library path (" + tried + ")";
    return l;
  }
  std::string missing;
  CuptiApi& a = l.api;
  bind_symbol(handle, "cuptiGetVersion", a.get_version, missing);
  bind_symbol(handle, "cuptiGetResultString", a.get_result_string, missing);
  bind_symbol(handle, "cuptiGetCallbackName", a.get_callback_name, missing);
  bind_symbol(handle, "cuptiGetTimestamp", a.get_timestamp, missing);
  bind_symbol(handle, "cuptiActivityRegisterCallbacks", a.activity_register_callbacks, missing);
  bind_symbol(handle, "cuptiActivityEnable", a.activity_enable, missing);
  bind_symbol(handle, "cuptiActivityDisable", a.activity_disable, missing);
  bind_symbol(handle, "cuptiActivityFlushAll", a.activity_flush_all, missing);
  bind_symbol(handle, "cuptiActivityGetNextRecord", a.activity_get_next_record, missing);
  bind_symbol(handle, "cuptiActivityGetNumDroppedRecords", a.activity_get_num_dropped_records, missing);
  bind_symbol(handle, "cuptiActivityPushExternalCorrelationId",
       a.activity_push_external_correlation_id, missing);
  bind_symbol(handle, "cuptiActivityPopExternalCorrelationId", a.activity_pop_external_correlation_id,
       missing);
  bind_symbol(handle, "cuptiSetThreadIdType", a.set_thread_id_type, missing);
  bind_symbol(handle, "cuptiGetThreadIdType", a.get_thread_id_type, missing);
  if (!missing.empty()) {
    l.why_not = a.library + " lacks " + missing + " (an older CUPTI than this build's)";
    return l;  // the handle stays open: harmless, and dlclose could unload a library in use
  }
  l.ok = true;
  return l;
}

}  // namespace

const CuptiApi* cupti_api(std::string* why_not) {
  static const Loaded loaded = load();
  if (!loaded.ok && why_not) *why_not = loaded.why_not;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace xrun::profiler
