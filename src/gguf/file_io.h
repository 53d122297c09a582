// Small POSIX file helpers for the caches kept on disk (the packed weights, the tokenizer's merge table,
// the prompt cache): whole reads and writes at an offset that survive EINTR and short transfers, a
// descriptor that closes itself, and the cleanup of temporaries that crashed writers left behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

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

// strerror(errno), for messages that name the file and the call that failed.
std::string errno_text();

// The temporary name a cache writer in this process writes `path` under before renaming it into place:
// `path`.tmp-PID.
std::string temporary_path(const std::string& path);
// Removes the temporaries of `path` (temporary_path) left by writers that died mid-write (their PID no
// longer runs): each can be as large as the cache itself.
void remove_abandoned_temporaries(const std::string& path);

}  // namespace gem4
