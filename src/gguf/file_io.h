// Small POSIX file helpers for the caches kept on disk (the packed weights, the prompt cache): whole
// reads and writes at an offset that survive EINTR and short transfers, and a descriptor that closes
// itself.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gem4 {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(int f) : fd(f) {}  // NOLINT: built from ::open's result
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
};

// Reads exactly n bytes at offset `at`; false on an error or end of file (errno tells which).
bool read_exact(int fd, void* dst, size_t n, uint64_t at);
// Writes exactly n bytes at offset `at`; false on an error (errno set; EIO for a zero-byte write).
bool write_exact(int fd, const void* src, size_t n, uint64_t at);

}  // namespace gem4
