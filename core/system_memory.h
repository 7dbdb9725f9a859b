// core/system_memory.h: how much memory this process may still take: the
// kernel's MemAvailable, or what a cgroup v2 memory limit leaves where that
// is less (a container, a Slurm job). What allocations that scale with user
// input (text read whole, doctor --allreduce's buffers, the CPU engine's
// plan) are checked against before they are made.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace xrun {

// Bytes available, or 0 when neither /proc/meminfo nor the cgroup says.
inline int64_t available_memory_bytes() {
  int64_t out = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    int64_t kib = 0;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        out = kib * 1024;
        break;
      }
  }
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  std::string max_text;
  int64_t current = 0;
  if (max_file >> max_text && max_text != "max" && current_file >> current) {
    try {
      const int64_t left = std::stoll(max_text) - current;
      if (left >= 0 && (out == 0 || left < out)) out = left;
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace xrun
