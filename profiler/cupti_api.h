// profiler/cupti_api.h: CUPTI's functions, loaded when first asked for
// (dlopen) rather than linked, so xrun starts where CUPTI is not installed
// (a CUDA runtime image has cuDNN and cuBLAS but no CUPTI): there tracing is
// off with one line saying why, and `xrun doctor` says CUPTI is missing.
#pragma once

#include <cupti.h>

#include <memory>
#include <string>

namespace xrun::profiler {

class ActivityCapture;

struct CuptiApi {
  decltype(&cuptiGetVersion) get_version;
  decltype(&cuptiGetResultString) get_result_string;
  decltype(&cuptiGetCallbackName) get_callback_name;
  decltype(&cuptiGetTimestamp) get_timestamp;
  decltype(&cuptiActivityRegisterCallbacks) activity_register_callbacks;
  decltype(&cuptiActivityEnable) activity_enable;
  decltype(&cuptiActivityDisable) activity_disable;
  decltype(&cuptiActivityFlushAll) activity_flush_all;
  decltype(&cuptiActivityGetNextRecord) activity_get_next_record;
  decltype(&cuptiActivityGetNumDroppedRecords) activity_get_num_dropped_records;
  decltype(&cuptiActivityPushExternalCorrelationId) activity_push_external_correlation_id;
  decltype(&cuptiActivityPopExternalCorrelationId) activity_pop_external_correlation_id;
  decltype(&cuptiSetThreadIdType) set_thread_id_type;
  decltype(&cuptiGetThreadIdType) get_thread_id_type;
  std::string library;  // the file that was loaded
};

// The loaded library (loaded once, kept for the process), or nullptr with
// `why_not` saying which libraries were tried.
const CuptiApi* cupti_api(std::string* why_not = nullptr);

// ActivityCapture::start with the given functions (the loaded library's;
// tests pass stand-ins to see what the collector asks of CUPTI). One
// capture at a time: `functions` must outlive it.
std::unique_ptr<ActivityCapture> start_cupti_capture(const CuptiApi& functions,
                                                     std::string& why_not);

}  // namespace xrun::profiler
