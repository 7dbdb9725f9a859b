// profiler/cupti_api.h: CUPTI's functions, loaded when first asked for
// (dlopen) rather than linked, so xrun starts where CUPTI is not installed
// (a CUDA runtime image has cuDNN and cuBLAS but no CUPTI): there tracing is
// off with one line saying why, and `xrun doctor` says CUPTI is missing.
#pragma once

#include <cupti.h>

#include <string>

namespace xrun::profiler {

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
  std::string library;  // the file that was loaded
};

// The loaded library (loaded once, kept for the process), or nullptr with
// `why_not` saying which libraries were tried.
const CuptiApi* cupti_api(std::string* why_not = nullptr);

}  // namespace xrun::profiler
