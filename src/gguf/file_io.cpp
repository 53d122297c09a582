#include "gguf/file_io.h"

#include <unistd.h>

#include <cerrno>

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

}  // namespace gem4
