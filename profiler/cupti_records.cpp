// profiler/cupti_records.cpp: see cupti_records.h.
#include "profiler/cupti_records.h"

namespace xrun::profiler {

CopyDirection copy_direction(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return CopyDirection::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return CopyDirection::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return CopyDirection::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyDirection::h2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return CopyDirection::peer;
    default: return CopyDirection::other;
  }
}

namespace {
HostMemory memory_of(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return HostMemory::pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return HostMemory::pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return HostMemory::device;
    default: return HostMemory::other;
  }
}
}  // namespace

HostMemory host_memory(CopyDirection direction, uint8_t src_kind, uint8_t dst_kind) {
  switch (direction) {
    case CopyDirection::h2d: return memory_of(src_kind);
    case CopyDirection::d2h: return memory_of(dst_kind);
    case CopyDirection::d2d:
    case CopyDirection::peer: return HostMemory::device;
    default: return memory_of(src_kind);
  }
}

namespace {
// A forced flush also delivers records of work still in flight, whose
// timestamps are not filled in yet (0): such a record times nothing.
bool complete(uint64_t start, uint64_t end) { return start != 0 && end >= start; }
}  // namespace

bool decode_activity(const CUpti_Activity* record, ActivityLog& log, const ApiNamer& api_name) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CuptiKernelRecord*>(record);
      if (!complete(k->start, k->end)) return false;
      // The name belongs to CUPTI and dies with the buffer: copy it.
      log.add(KernelActivity{k->name ? k->name : "?", k->start, k->end, k->streamId,
                             k->correlationId});
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CuptiMemcpyRecord*>(record);
      if (!complete(m->start, m->end)) return false;
      const CopyDirection d = copy_direction(m->copyKind);
      log.add(CopyActivity{d, host_memory(d, m->srcKind, m->dstKind), m->bytes, m->start, m->end,
                           m->streamId, m->correlationId});
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CuptiMemsetRecord*>(record);
      if (!complete(m->start, m->end)) return false;
      log.add(CopyActivity{CopyDirection::memset, HostMemory::device, m->bytes, m->start, m->end,
                           m->streamId, m->correlationId});
      return true;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      if (!complete(a->start, a->end)) return false;
      const bool runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      log.add(ApiActivity{api_name ? api_name(runtime, a->cbid) : std::string(),
                          a->start, a->end, a->threadId, a->correlationId});
      return true;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return false;
      log.add(ExternalCorrelation{e->correlationId, e->externalId});
      return true;
    }
    default: return false;
  }
}

}  // namespace xrun::profiler
