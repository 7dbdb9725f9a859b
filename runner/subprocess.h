// runner/subprocess.h: running another program (sbatch, squeue, sacct,
// scontrol) without a shell: argv as given, its exit status and output.
#pragma once

#include <string>
#include <vector>

namespace xrun::cli {

// Runs `argv` (looked up on the PATH) and waits. Returns its exit status:
// 127 when it cannot be started, 128 + N when signal N ended it. `out` gets
// what it printed on stdout, and on stderr too when `with_stderr`.
int run_program(const std::vector<std::string>& argv, std::string& out, bool with_stderr);

}  // namespace xrun::cli
