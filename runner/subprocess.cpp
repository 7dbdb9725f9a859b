// runner/subprocess.cpp: see subprocess.h.
#include "runner/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace xrun::cli {

int run_program(const std::vector<std::string>& argv, std::string& out, bool with_stderr) {
  int fds[2];
  if (argv.empty() || pipe(fds) != 0) return 127;
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    if (with_stderr) {
      dup2(fds[1], STDERR_FILENO);
    } else if (const int null = open("/dev/null", O_WRONLY); null >= 0) {
      dup2(null, STDERR_FILENO);
    }
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "%s: %s\n", argv[0].c_str(), std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace xrun::cli
