// tests/profiler/recorder/nvtx_recorder.cpp: an NVTX tool, loaded by NVTX3 through
// NVTX_INJECTION64_PATH exactly as Nsight Systems is, that writes every
// domain, registered string, range push/pop and thread name it is handed to
// the file named by XRUN_NVTX_LOG, one event per line:
//   domain <id> <name> | string <id> <text> | push <domain> <string-id> <payload or ->
//   pop <domain> | thread <tid> <name>
// The nvtx test runs a real training through it and checks what it saw.
#include <nvtx3/nvToolsExt.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

std::mutex g_mu;
std::FILE* g_log = nullptr;
long g_next_domain = 1, g_next_string = 1;

void write(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void write(const char* fmt, ...) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_log) return;
  va_list args;
  va_start(args, fmt);
  std::vfprintf(g_log, fmt, args);
  va_end(args);
  std::fflush(g_log);
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  long id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id = g_next_domain++;
  }
  write("domain %ld %s\n", id, name);
  return reinterpret_cast<nvtxDomainHandle_t>(id);
}

nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t d, const char* text) {
  long id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id = g_next_string++;
  }
  write("string %ld %s\n", id, text);
  return reinterpret_cast<nvtxStringHandle_t>(id);
}

int NVTX_API range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const long domain = reinterpret_cast<long>(d);
  const long string = a->messageType == NVTX_MESSAGE_TYPE_REGISTERED
                          ? reinterpret_cast<long>(a->message.registered)
                          : 0;
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64)
    write("push %ld %ld %lld\n", domain, string, static_cast<long long>(a->payload.llValue));
  else
    write("push %ld %ld -\n", domain, string);
  return 0;
}

int NVTX_API range_pop(nvtxDomainHandle_t d) {
  write("pop %ld\n", reinterpret_cast<long>(d));
  return 0;
}

void NVTX_API name_thread(uint32_t tid, const char* name) { write("thread %u %s\n", tid, name); }

}  // namespace

// NVTX's headers before CUDA 12.5 have no NVTX_DYNAMIC_EXPORT: what it is.
#ifndef NVTX_DYNAMIC_EXPORT
#define NVTX_DYNAMIC_EXPORT __attribute__((visibility("default")))
#endif

extern "C" NVTX_DYNAMIC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = std::getenv("XRUN_NVTX_LOG");
  g_log = std::fopen(path ? path : "/dev/null", "w");
  auto callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable core2 = nullptr, core = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &size) || !core2) return 0;
  *core2[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(domain_create);
  *core2[NVTX_CBID_CORE2_DomainRegisterStringA] =
      reinterpret_cast<NvtxFunctionPointer>(register_string);
  *core2[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(range_push);
  *core2[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(range_pop);
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &size) && core)
    *core[NVTX_CBID_CORE_NameOsThreadA] = reinterpret_cast<NvtxFunctionPointer>(name_thread);
  return 1;
}
