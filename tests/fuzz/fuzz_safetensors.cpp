// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for the safetensors
// reader (engine/checkpoint/safetensors.cpp): the input is written to a
// file, SafetensorsFile::open maps and validates it, then every entry is
// read whole (span and to_vector) and looked up by name.
//
// A bad file must end in a CheckpointError; any other exception, a crash,
// a read outside the mapping or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors.h"
#include "fuzz_util.h"

namespace {

volatile uint64_t g_sink;  // keeps the reads from being optimised away

template <class T>
uint64_t sum_of(const xrun::SafetensorsFile::Entry& e) {
  uint64_t s = 0;
  for (T v : e.to_vector<T>()) s += static_cast<uint64_t>(v);
  return s;
}

void touch(const xrun::SafetensorsFile& f) {
  uint64_t sum = f.file_size() + f.metadata().size();
  for (const auto& [k, v] : f.metadata()) sum += k.size() + v.size();
  for (const auto& e : f.entries()) {
    for (std::byte b : e.span()) sum += static_cast<uint8_t>(b);
    sum += static_cast<uint64_t>(e.numel());
    const int bits = xrun::safetensors_dtype_bits(e.dtype);
    switch (bits % 8 == 0 ? bits / 8 : 1) {
      case 1: sum += sum_of<uint8_t>(e); break;
      case 2: sum += sum_of<uint16_t>(e); break;
      case 4: sum += sum_of<uint32_t>(e); break;
      case 8: sum += sum_of<uint64_t>(e); break;
      default: break;
    }
    try {
      (void)e.to_vector<double>();  // wrong element size for most dtypes: refused
    } catch (const xrun::CheckpointError&) {
    }
  }
  for (const std::string& name : f.names()) {
    if (!f.contains(name)) std::abort();
    sum += f.get(name).bytes;
  }
  g_sink = sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = xrun_fuzz::scratch_file("input.safetensors");
  xrun_fuzz::write_file(path, data, size);
  try {
    const xrun::SafetensorsFile f = xrun::SafetensorsFile::open(path);
    touch(f);
  } catch (const xrun::CheckpointError& e) {
    xrun_fuzz::expected("safetensors", e.what());
    // expected: a file that is not valid safetensors
  } catch (const std::exception& e) {
    xrun_fuzz::unexpected("safetensors", e.what());
  }
  return 0;
}
