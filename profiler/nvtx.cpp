// profiler/nvtx.cpp: see nvtx.h. Registered strings are kept in a map (one
// registration per distinct name, under a mutex: ranges come from the
// training thread, thread names from loader threads). Every range also goes
// to the host trace while a trace window is open (profiler/trace.h), and to
// the range listener (CUPTI's external correlation ids) when there is one.
#include "profiler/nvtx.h"

#include "profiler/trace.h"

#include <atomic>

#ifdef XRUN_HAVE_NVTX
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <nvtx3/nvToolsExt.h>
#include <unordered_map>
#endif

namespace xrun::profiler {

namespace {
std::atomic<bool> g_enabled{true};
std::atomic<RangeListener*> g_listener{nullptr};

#ifdef XRUN_HAVE_NVTX
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("xrun");
  return d;
}

nvtxStringHandle_t registered(const std::string& name) {
  static std::mutex mu;
  static std::unordered_map<std::string, nvtxStringHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(name);
  if (it != handles.end()) return it->second;
  nvtxStringHandle_t h = nvtxDomainRegisterStringA(domain(), name.c_str());
  handles.emplace(name, h);
  return h;
}
#endif
}  // namespace

void Nvtx::set_enabled(bool on) { g_enabled = on; }
bool Nvtx::enabled() { return g_enabled; }

void Nvtx::set_listener(RangeListener* listener) { g_listener = listener; }

void Nvtx::push(const std::string& name, int64_t payload) {
  if (HostTrace::active()) HostTrace::begin(name, payload);
  if (RangeListener* l = g_listener.load()) l->on_push(name);
#ifdef XRUN_HAVE_NVTX
  if (!g_enabled) return;
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = registered(name);
  if (payload >= 0) {
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = payload;
  }
  nvtxDomainRangePushEx(domain(), &a);
#else
  (void)name;
  (void)payload;
#endif
}

void Nvtx::pop() {
  if (HostTrace::active()) HostTrace::end();
  if (RangeListener* l = g_listener.load()) l->on_pop();
#ifdef XRUN_HAVE_NVTX
  if (!g_enabled) return;
  nvtxDomainRangePop(domain());
#endif
}

void Nvtx::name_this_thread(const std::string& name) {
#ifdef XRUN_HAVE_NVTX
  if (!g_enabled) return;
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), name.c_str());
#else
  (void)name;
#endif
}

}  // namespace xrun::profiler
