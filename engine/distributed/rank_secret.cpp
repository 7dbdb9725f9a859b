// engine/distributed/rank_secret.cpp: the run's secret, which every rank
// proves it holds before the ranks exchange any data. A rank's TCP port
// accepts whoever connects first; what keeps a stranger out is that only
// processes that can read the rendezvous folder (the user's own, mode 0700)
// know the secret, and each rank answers a fresh challenge from every other
// with an HMAC-SHA-256 over the secret, both ranks' numbers and the
// challenge (gloo_communicator.cpp's verify_peers). See communicator.h.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/sha256.h"
#include "engine/distributed/communicator.h"

namespace xrun::dist {

namespace {

std::string secret_path(const std::string& rendezvous) {
  return (std::filesystem::path(rendezvous) / "secret").string();
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw CommError(std::string("cannot draw random bytes (getrandom): ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

void write_rank_secret(const std::string& rendezvous) {
  const std::string path = secret_path(rendezvous);
  const std::string raw = random_bytes(32);
  const std::string hex = to_hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw CommError("cannot create the ranks' secret " + path + ": " + std::strerror(errno));
  const std::string text = hex + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!ok) throw CommError("cannot write the ranks' secret " + path + ": " + std::strerror(saved));
}

std::string read_rank_secret(const std::string& rendezvous) {
  const std::string path = secret_path(rendezvous);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    throw CommError("cannot read the ranks' secret " + path + ": " + std::strerror(errno) +
                    " (whoever makes the rendezvous folder writes it before the ranks start: "
                    "`xrun run`, or the batch script of `xrun submit`)");
  struct stat st {};
  std::string text(129, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (!S_ISREG(st.st_mode)) throw CommError("the ranks' secret " + path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    throw CommError("the ranks' secret " + path + " belongs to another user (uid " +
                    std::to_string(st.st_uid) + "): refused");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw CommError("the ranks' secret " + path + " can be read or written by others (mode " +
                    mode + "; it must be 0600): refused");
  }
  if (n < 0) throw CommError("cannot read the ranks' secret " + path + ": " + std::strerror(errno));
  text.resize(static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.size() < 32 || text.size() > 128)
    throw CommError("the ranks' secret " + path + " holds " + std::to_string(text.size()) +
                    " characters: expected 32 to 128 (64 hex digits as written)");
  return text;
}

std::string rank_proof(const std::string& secret, int from, int to, std::string_view nonce) {
  std::string message = "xrun rank proof v1 from " + std::to_string(from) + " to " +
                        std::to_string(to) + " nonce ";
  message.append(nonce);
  const Sha256Digest d = hmac_sha256(secret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

bool same_proof(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // every byte looked at: no early exit to time
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace xrun::dist
