// profiler/cupti_records.h: CUPTI activity records (CUpti_ActivityKernel10,
// CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityAPI,
// CUpti_ActivityExternalCorrelation) turned into profiler/activity.h's
// neutral records. Needs CUPTI's headers, not its library or a GPU: the
// tests build records in memory and decode them.
#pragma once

#include <cupti_activity.h>

#include <functional>
#include <string>

#include "profiler/activity.h"
#include "profiler/cupti_compat.h"

namespace xrun::profiler {

// The name of a runtime (CUPTI_ACTIVITY_KIND_RUNTIME) or driver call by its
// callback id; the collector passes cuptiGetCallbackName.
using ApiNamer = std::function<std::string(bool runtime, uint32_t cbid)>;

// Adds `record` to `log` when it is a kind the log uses; returns false for
// other kinds (ignored).
bool decode_activity(const CUpti_Activity* record, ActivityLog& log, const ApiNamer& api_name);

CopyDirection copy_direction(uint8_t cupti_copy_kind);
// The host side's memory kind of a copy (device for device-to-device).
HostMemory host_memory(CopyDirection direction, uint8_t src_kind, uint8_t dst_kind);

}  // namespace xrun::profiler
