// profiler/cupti_collector.cpp: ActivityCapture on CUPTI's activity API.
// CUPTI's functions come through cupti_api (loaded at run time). CUPTI asks for buffers and hands them back full on its own thread; they
// wait in a list (under a mutex, no CUDA calls there) until flush(), which
// the training thread calls after a device synchronisation, decodes them
// into the ActivityLog (profiler/cupti_records.cpp) and frees them (forced
// flushes: see flush()). Any
// CUPTI failure at start means "tracing off" with CUPTI's own message.
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "profiler/activity_capture.h"
#include "profiler/cupti_api.h"
#include "profiler/cupti_records.h"

namespace xrun::profiler {

namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr CUpti_ActivityKind kTracedKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

struct Completed {
  uint8_t* buffer;
  size_t valid;
};

// The functions in use: the loaded library's (ActivityCapture::start), or a
// test's stand-ins (start_cupti_capture).
const CuptiApi* g_api = nullptr;
const CuptiApi& api() { return *g_api; }

std::mutex g_mu;
std::vector<Completed> g_completed;
std::atomic<int64_t> g_dropped{0};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  size_t dropped = 0;
  if (api().activity_get_num_dropped_records(ctx, stream, &dropped) == CUPTI_SUCCESS)
    g_dropped += static_cast<int64_t>(dropped);
  std::lock_guard<std::mutex> lock(g_mu);
  g_completed.push_back({buffer, valid});
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  api().get_result_string(r, &s);
  return s ? s : "CUPTI error " + std::to_string(static_cast<int>(r));
}

std::string api_name(bool runtime, uint32_t cbid) {
  const char* name = nullptr;
  api().get_callback_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                       &name);
  return name ? name : (runtime ? "cuda runtime " : "cuda driver ") + std::to_string(cbid);
}

class CuptiCapture final : public ActivityCapture {
 public:
  CuptiCapture() : thread_(static_cast<uint32_t>(syscall(SYS_gettid))) {}
  ~CuptiCapture() override {
    set_tracing(false);
    api().activity_disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    api().activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(g_mu);
    for (const Completed& c : g_completed) std::free(c.buffer);
    g_completed.clear();
  }

  // Enables everything once (so a refusal shows at start), then idles.
  // API records carry the system thread id (gettid, as host_thread() and
  // the host trace use), not CUPTI's default pthread_self(), so they land on
  // the host thread's track.
  bool enable_all(std::string& why_not) {
    CUptiResult r = api().set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (r == CUPTI_SUCCESS)
      r = api().activity_register_callbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) r = api().activity_enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    for (CUpti_ActivityKind k : kTracedKinds)
      if (r == CUPTI_SUCCESS) r = api().activity_enable(k);
    if (r == CUPTI_SUCCESS) return true;
    why_not = "CUPTI could not start (" + result_text(r) + ")";
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      why_not += ": another profiler (nsys, ncu, compute-sanitizer) is attached";
    else if (r == CUPTI_ERROR_UNKNOWN || r == CUPTI_ERROR_NOT_INITIALIZED)
      why_not += ": no usable CUDA driver or device?";
    return false;
  }

  void set_tracing(bool on) override {
    if (on == tracing_) return;
    for (CUpti_ActivityKind k : kTracedKinds) on ? api().activity_enable(k) : api().activity_disable(k);
    tracing_ = on;
  }
  uint64_t now_ns() override {
    uint64_t t = 0;
    api().get_timestamp(&t);
    return t;
  }
  void push_range(uint64_t id) override {
    api().activity_push_external_correlation_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  }
  void pop_range() override {
    uint64_t last = 0;
    api().activity_pop_external_correlation_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }
  // Forced: a default flush (flag 0) returns no buffer that holds an
  // incomplete record, so one record still in flight would hold back the
  // whole step's buffer (to be decoded into a later step, or never). A
  // forced flush returns every buffer; decode_activity skips the records
  // not yet complete.
  void flush(ActivityLog& log) override {
    api().activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<Completed> done;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      done.swap(g_completed);
    }
    for (const Completed& c : done) {
      CUpti_Activity* record = nullptr;
      while (api().activity_get_next_record(c.buffer, c.valid, &record) == CUPTI_SUCCESS)
        decode_activity(record, log, api_name);
      std::free(c.buffer);
    }
  }
  uint32_t host_thread() const override { return thread_; }
  int64_t dropped_records() const override { return g_dropped; }

 private:
  uint32_t thread_;
  bool tracing_ = true;
};

}  // namespace

std::unique_ptr<ActivityCapture> start_cupti_capture(const CuptiApi& functions,
                                                     std::string& why_not) {
  g_api = &functions;
  auto capture = std::make_unique<CuptiCapture>();
  if (!capture->enable_all(why_not)) return nullptr;
  return capture;
}

std::unique_ptr<ActivityCapture> ActivityCapture::start(std::string& why_not) {
  const CuptiApi* loaded = cupti_api(&why_not);
  if (!loaded) return nullptr;
  return start_cupti_capture(*loaded, why_not);
}

}  // namespace xrun::profiler
