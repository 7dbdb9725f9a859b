// runner/nsys_command.cpp: `xrun run FILE --nsys [OUT]`: xrun runs itself
// under Nsight Systems with the capture limited to the measured steps (the
// engine calls cudaProfilerStart/Stop around them), tracing CUDA, NVTX,
// cuDNN and cuBLAS.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "runner/commands.h"

namespace xrun::cli {

namespace {

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

}  // namespace

int run_under_nsys(const RunArgs& args) {
  const std::string nsys = find_on_path("nsys");
  if (nsys.empty()) {
    std::cerr << "xrun: --nsys: nsys (Nsight Systems) is not on the PATH. Install it, or run:\n"
              << "  nsys profile -t cuda,nvtx,cudnn,cublas --capture-range=cudaProfilerApi "
                 "--capture-range-end=stop -o " << args.nsys << " xrun run " << args.file << "\n";
    return kUsage;
  }
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> argv = {nsys,
                                   "profile",
                                   "-t",
                                   "cuda,nvtx,cudnn,cublas",
                                   "--capture-range=cudaProfilerApi",
                                   "--capture-range-end=stop",
                                   "-o",
                                   args.nsys,
                                   "--force-overwrite",
                                   "true",
                                   ec ? std::string("xrun") : self,
                                   "run",
                                   args.file};
  if (!args.db.empty()) argv.insert(argv.end(), {"--db", args.db});
  if (!args.only.empty()) {
    std::string only;
    for (int i : args.only) {
      if (!only.empty()) only += ',';
      only += std::to_string(i);
    }
    argv.insert(argv.end(), {"--only", only});
  }
  for (const std::string& s : args.sets) argv.insert(argv.end(), {"--set", s});
  if (args.force) argv.push_back("--force");
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::cerr << "xrun: running under Nsight Systems, report " << args.nsys << ".nsys-rep\n";
  execv(nsys.c_str(), cargv.data());
  std::cerr << "xrun: --nsys: could not start " << nsys << ": " << std::strerror(errno) << "\n";
  return kRunFailed;
}

}  // namespace xrun::cli
