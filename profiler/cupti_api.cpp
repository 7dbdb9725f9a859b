// profiler/cupti_api.cpp: see cupti_api.h. Tried in order: libcupti.so.N for
// the CUDA major version this build was compiled against (what the library
// path, the executable's run path or LD_LIBRARY_PATH offers: the toolkit's
// or PyTorch's nvidia-cuda-cupti wheel), then the file CMake found at
// configure time.
#include "profiler/cupti_api.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <vector>

namespace xrun::profiler {

namespace {

template <class F>
bool bind(void* handle, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (!out) missing += missing.empty() ? name : std::string(", ") + name;
  return out != nullptr;
}

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
  void* handle = nullptr;
  std::string tried;
  for (const std::string& name : names) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      l.api.library = name;
      break;
    }
    const char* err = dlerror();
    tried += (tried.empty() ? "" : "; ") + (err ? std::string(err) : name);
  }
  if (!handle) {
    l.why_not = "CUPTI is not installed or not on the library path (" + tried + ")";
    return l;
  }
  std::string missing;
  CuptiApi& a = l.api;
  bind(handle, "cuptiGetVersion", a.get_version, missing);
  bind(handle, "cuptiGetResultString", a.get_result_string, missing);
  bind(handle, "cuptiGetCallbackName", a.get_callback_name, missing);
  bind(handle, "cuptiGetTimestamp", a.get_timestamp, missing);
  bind(handle, "cuptiActivityRegisterCallbacks", a.activity_register_callbacks, missing);
  bind(handle, "cuptiActivityEnable", a.activity_enable, missing);
  bind(handle, "cuptiActivityDisable", a.activity_disable, missing);
  bind(handle, "cuptiActivityFlushAll", a.activity_flush_all, missing);
  bind(handle, "cuptiActivityGetNextRecord", a.activity_get_next_record, missing);
  bind(handle, "cuptiActivityGetNumDroppedRecords", a.activity_get_num_dropped_records, missing);
  bind(handle, "cuptiActivityPushExternalCorrelationId",
       a.activity_push_external_correlation_id, missing);
  bind(handle, "cuptiActivityPopExternalCorrelationId", a.activity_pop_external_correlation_id,
       missing);
  bind(handle, "cuptiSetThreadIdType", a.set_thread_id_type, missing);
  bind(handle, "cuptiGetThreadIdType", a.get_thread_id_type, missing);
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
