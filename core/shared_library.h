// core/shared_library.h: a library loaded at run time (CUPTI, NCCL): the
// first of several names that dlopen finds, and its symbols bound into
// typed function pointers, with what was tried and what is missing for the
// message that says why a feature is off.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace xrun {

// The first of `names` that dlopen opens (RTLD_NOW | RTLD_LOCAL; never
// closed), with its name in `loaded`; nullptr with dlerror()'s text for each
// name, ';'-separated, in `tried`.
inline void* open_first_library(const std::vector<std::string>& names, std::string& loaded,
                                std::string& tried) {
  for (const std::string& name : names) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      loaded = name;
      return handle;
    }
    const char* err = dlerror();
    tried += (tried.empty() ? "" : "; ") + (err ? std::string(err) : name);
  }
  return nullptr;
}

// `out` = the symbol `name` of `handle`; a missing one is added to the
// ", "-separated `missing`.
template <class F>
bool bind_symbol(void* handle, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (!out) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return out != nullptr;
}

}  // namespace xrun
