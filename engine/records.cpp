// engine/records.cpp: names of the record enums, as the store writes them.
#include "engine/records.h"

namespace xrun {

const char* to_string(StepKind kind) {
  switch (kind) {
    case StepKind::warmup: return "warmup";
    case StepKind::measured: return "measured";
    case StepKind::unmeasured: return "unmeasured";
  }
  return "?";
}

}  // namespace xrun
