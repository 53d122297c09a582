#include "gguf/file_io.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace gem4 {

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

bool read_exact(int fd, void* dst, size_t n, uint64_t at) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off_t(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r), at += uint64_t(r);
  }
  return true;
}

bool write_exact(int fd, const void* src, size_t n, uint64_t at) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, off_t(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return false;
    }
    p += r, n -= size_t(r), at += uint64_t(r);
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

std::string temporary_path(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

void remove_abandoned_temporaries(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace gem4
