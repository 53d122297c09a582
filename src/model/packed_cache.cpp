#include "model/packed_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "gguf/file_io.h"
#include "gguf/gguf.h"
#include "gguf/huge_pages.h"
#include "gguf/large_alloc.h"
#include "kernels/fnv1a.h"
#include "kernels/thread_pool.h"

namespace gem4 {

namespace {

// Asks for the cache file's pages in 2 MiB folios (large folios in the page cache, mapped by one
// page-table entry each; ext4 and others support them on recent kernels). Without the advice the
// packing threads' scattered writes left a fifth to a quarter of a 26B-A4B cache (2.7-3.5 of 13.4
// GiB) in 4 KiB pages, with it 0.8-1.2 GiB (Linux 6.18, ext4). In 4 KiB pages every page is a TLB
// miss (a nested walk in a VM) and the hardware prefetchers stop at each boundary: read loops over
// random 64 KiB-2 MiB pieces of 4 GiB ran 5-15 % faster over huge pages, paired in one process on a
// Zen 5 VM. Advice only: where the kernel or file system cannot, nothing changes.
void ask_for_huge_pages(void* map, size_t bytes) { ::madvise(map, bytes, MADV_HUGEPAGE); }

// Where the page cache still holds parts of the mapped file in small folios (written, or read back,
// while memory was short), reads them again in 2 MiB ones (gguf/huge_pages.h). Returns what it did for
// the load's report, "" when there was nothing to do or the kernel cannot tell.
std::string settle_in_huge_pages(int fd, void* map, size_t bytes) {
  const HugePageReread r = reread_into_huge_pages(fd, map, bytes);
  constexpr size_t kMiB = size_t{1} << 20;
  if (!r.measured || r.small_before < 64 * kMiB) return "";
  std::string s = std::to_string(r.small_before / kMiB) + " MiB of it in 4 KiB pages";
  if (r.reread > 0) {
    s += ", " + std::to_string(r.reread / kMiB) + " MiB read again: " + std::to_string(r.small_after / kMiB) +
         " MiB left";
  }
  if (!r.stopped.empty()) s += " (" + r.stopped + ")";
  return s;
}

constexpr char kMagic[8] = {'G', 'E', 'M', '4', 'P', 'A', 'C', 'K'};
constexpr uint32_t kVersion = 2;  // 2: the source path after the entries
constexpr uint64_t kAlign = 4096;  // each copy starts on a page, as the anonymous copies do

// The file's first bytes. All integers little-endian (the only byte order gem4 runs on).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t n_matrices;
  uint64_t layout_fingerprint;
  // The GGUF file the copies were made from.
  uint64_t source_size, source_mtime_ns, source_inode, source_device;
  uint64_t file_size;
  uint64_t entries_hash;  // FNV-1a of the entries that follow the header
  // The GGUF file's canonical path, stored after the entries: lets a writer find the caches of files
  // that no longer exist (remove_orphaned_caches).
  uint32_t source_path_bytes;
  uint32_t reserved;
};

// One matrix: where its weights are in the GGUF file, what they are, and where its copy is here.
struct Entry {
  uint64_t source_offset;
  uint32_t type;
  uint32_t reserved;
  int64_t in, out;
  uint64_t offset, bytes;
};

std::string canonical_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::path full = std::filesystem::weakly_canonical(path, ec);
  if (ec) full = std::filesystem::absolute(path, ec);
  return full.string();
}

// What the cache file of `file` must say, given the matrices to pack (entries' offsets laid out here).
bool expected_contents(const gguf::GgufFile& file, std::span<MatrixView* const> matrices, Header* header,
                       std::vector<Entry>* entries, std::string* source_path, std::string* why) {
  struct stat st {};
  if (::stat(file.path().c_str(), &st) != 0) {
    *why = "cannot stat " + file.path() + ": " + errno_text();
    return false;
  }
  *header = Header{};
  std::memcpy(header->magic, kMagic, sizeof kMagic);
  header->version = kVersion;
  header->n_matrices = uint32_t(matrices.size());
  header->layout_fingerprint = packed_layout_fingerprint();
  header->source_size = uint64_t(st.st_size);
  header->source_mtime_ns = uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
  header->source_inode = uint64_t(st.st_ino);
  header->source_device = uint64_t(st.st_dev);
  *source_path = canonical_path(file.path());
  header->source_path_bytes = uint32_t(source_path->size());
  entries->assign(matrices.size(), Entry{});
  uint64_t offset =
      (sizeof(Header) + matrices.size() * sizeof(Entry) + source_path->size() + kAlign - 1) / kAlign * kAlign;
  const uint8_t* image = file.image();
  for (size_t i = 0; i < matrices.size(); ++i) {
    const MatrixView& w = *matrices[i];
    const auto* data = static_cast<const uint8_t*>(w.data);
    if (!image || data < image || data >= image + file.file_size()) {
      *why = "a matrix does not lie in " + file.path();
      return false;
    }
    Entry& e = (*entries)[i];
    e.source_offset = uint64_t(data - image);
    e.type = uint32_t(w.type);
    e.in = w.in;
    e.out = w.out;
    e.offset = offset;
    e.bytes = packed_matrix_bytes(w);
    offset = (offset + e.bytes + kAlign - 1) / kAlign * kAlign;
  }
  header->file_size = entries->empty() ? offset : entries->back().offset + entries->back().bytes;
  header->entries_hash = fnv1a(entries->data(), entries->size() * sizeof(Entry));
  return true;
}

// Removes the caches in `dir` whose GGUF file no longer exists (moved, renamed or deleted): nothing
// would ever map them again, and each can be gigabytes. Files of other versions are left alone.
void remove_orphaned_caches(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".gem4pack") continue;
    Fd f{::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC)};
    Header h{};
    if (f.fd < 0 || !read_exact(f.fd, &h, sizeof h, 0)) continue;
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion || h.source_path_bytes == 0 ||
        h.source_path_bytes > 65536) {
      continue;
    }
    std::string source(h.source_path_bytes, '\0');
    if (!read_exact(f.fd, source.data(), source.size(), sizeof h + uint64_t(h.n_matrices) * sizeof(Entry))) continue;
    std::error_code exists_ec;
    if (!std::filesystem::exists(source, exists_ec) && !exists_ec) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

std::string default_packed_cache_dir() {
  if (const char* v = std::getenv("GEM4_PACK_CACHE")) {
    const std::string s = v;
    return s == "off" ? std::string() : s;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/gem4";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/gem4";
  return {};
}

std::string packed_cache_path(const std::string& dir, const std::string& gguf_path) {
  const std::string key = canonical_path(gguf_path);
  const std::filesystem::path full(key);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(key.data(), key.size())));
  return (std::filesystem::path(dir) / (full.filename().string() + "-" + hash + ".gem4pack")).string();
}

namespace {

// The cache file of `file` in `dir`, open, when everything in it matches what `matrices` need (`want`,
// `want_entries`: where each copy lies in it); else fd -1 and *why says what did not match.
struct CurrentCache {
  Fd f;
  Header want;
  std::vector<Entry> want_entries;
  std::string path;
};

bool open_current_cache(const std::string& dir, const gguf::GgufFile& file,
                        std::span<MatrixView* const> matrices, CurrentCache& c, std::string* why) {
  Header& want = c.want;
  std::vector<Entry>& want_entries = c.want_entries;
  std::string source_path;
  if (!expected_contents(file, matrices, &want, &want_entries, &source_path, why)) return false;
  const std::string& path = c.path = packed_cache_path(dir, file.path());
  Fd& f = c.f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    *why = errno == ENOENT ? "no cache file yet (" + path + ")" : "cannot open " + path + ": " + errno_text();
    return false;
  }
  struct stat st {};
  Header have{};
  if (::fstat(f.fd, &st) != 0 || !read_exact(f.fd, &have, sizeof have, 0)) {
    *why = path + ": cannot read its header";
    return false;
  }
  if (std::memcmp(have.magic, kMagic, sizeof kMagic) != 0 || have.version != kVersion) {
    *why = path + ": not a gem4 packed-weight cache of this version";
    return false;
  }
  if (have.layout_fingerprint != want.layout_fingerprint) {
    *why = path + ": written by a gem4 build with other packed layouts";
    return false;
  }
  if (have.source_size != want.source_size || have.source_mtime_ns != want.source_mtime_ns ||
      have.source_inode != want.source_inode || have.source_device != want.source_device) {
    *why = path + ": made from another version of " + file.path();
    return false;
  }
  if (have.n_matrices != want.n_matrices || have.file_size != want.file_size ||
      uint64_t(st.st_size) != want.file_size || have.entries_hash != want.entries_hash) {
    *why = path + ": its matrices or size do not match " + file.path();
    return false;
  }
  std::vector<Entry> have_entries(want_entries.size());
  std::string have_path(source_path.size(), '\0');
  const size_t entries_bytes = have_entries.size() * sizeof(Entry);
  if (!read_exact(f.fd, have_entries.data(), entries_bytes, sizeof(Header)) ||
      std::memcmp(have_entries.data(), want_entries.data(), entries_bytes) != 0 ||
      have.source_path_bytes != want.source_path_bytes ||
      !read_exact(f.fd, have_path.data(), have_path.size(), sizeof(Header) + entries_bytes) || have_path != source_path) {
    *why = path + ": its matrix table does not match " + file.path();
    return false;
  }
  return true;
}

void attach_all(std::span<MatrixView* const> matrices, const CurrentCache& c, const void* copies,
                PackedStore& store) {
  const auto* base = static_cast<const uint8_t*>(copies);
  for (size_t i = 0; i < matrices.size(); ++i)
    *matrices[i] = store.attach(*matrices[i], base + c.want_entries[i].offset);
}

}  // namespace

bool map_packed_cache(const std::string& dir, const gguf::GgufFile& file,
                      std::span<MatrixView* const> matrices, PackedStore& store, std::string* why,
                      std::string* pages_note) {
  CurrentCache c;
  if (!open_current_cache(dir, file, matrices, c, why)) return false;
  const Header& want = c.want;
  if (want.file_size == 0) return true;
  const Fd& f = c.f;
  const std::string& path = c.path;
  void* map = ::mmap(nullptr, want.file_size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (map == MAP_FAILED) {
    *why = "cannot map " + path + ": " + errno_text();
    return false;
  }
  ask_for_huge_pages(map, want.file_size);
  // Every page mapped in one call: from a hot page cache that is ~0.1 s for 1.28 GiB, against one
  // fault per 64 KiB otherwise. MADV_POPULATE_READ (Linux 5.14) keeps the huge-page advice, which
  // MAP_POPULATE would come too early for; on an older kernel the pages fault in as they are read.
  ::madvise(map, want.file_size, MADV_POPULATE_READ);
  store.adopt_mapping(map, want.file_size);
  const std::string pages = settle_in_huge_pages(f.fd, map, want.file_size);
  if (pages_note) *pages_note = pages;
  attach_all(matrices, c, map, store);
  return true;
}

bool read_packed_cache(const std::string& dir, const gguf::GgufFile& file,
                       std::span<MatrixView* const> matrices, ThreadPool* pool, PackedStore& store,
                       std::string* why) {
  CurrentCache c;
  if (!open_current_cache(dir, file, matrices, c, why)) return false;
  const size_t bytes = c.want.file_size;
  if (bytes == 0) return true;
  // In 2 MiB pages (advised; the kernel may compact memory to find them, which costs load time): a
  // 26B-A4B's 13.4 GiB in 4 KiB pages needs 27 MiB of page-table entries, more than the last-level
  // cache, and decode, which reads other experts at every token, then walks them from memory (read
  // into 4 KiB pages on a 23 GiB VM: decode 20.5 GB/s where the weights' plain read ran at 28).
  void* mem = nullptr;
  try {
    mem = allocate_large(bytes, Pages::Huge);
  } catch (const std::bad_alloc&) {
    *why = "cannot allocate " + std::to_string(bytes >> 20) + " MiB for the copies in " + c.path;
    return false;
  }
  // Read in 64 MiB pieces shared out among the threads: touching fresh memory is most of the cost, and
  // it is paid per thread in parallel.
  constexpr int64_t kPiece = int64_t{64} << 20;
  std::atomic<bool> failed{false};
  std::atomic<int> error{0};
  auto read_pieces = [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1 && !failed; ++p) {
      const size_t at = size_t(p * kPiece), n = std::min(size_t(kPiece), bytes - at);
      errno = 0;  // read_exact leaves it alone at the end of the file
      if (!read_exact(c.f.fd, static_cast<uint8_t*>(mem) + at, n, at)) {
        error = errno;
        failed = true;
      }
    }
  };
  const int64_t pieces = (int64_t(bytes) + kPiece - 1) / kPiece;
  if (pool)
    pool->parallel_for_dynamic(pieces, 1, read_pieces);
  else
    read_pieces(0, pieces, 0);
  if (failed) {
    free_large(mem, bytes);
    *why =
        "cannot read " + c.path + ": " + (error ? std::strerror(error) : "file shorter than its header says");
    return false;
  }
  store.adopt_memory(mem, bytes);
  attach_all(matrices, c, mem, store);
  return true;
}

// 10 % of the disk (the rule until 2026-12-04) kept a 26B-A4B cache (13.4 GiB) off a 252 GB disk with
// 30 GB free, and failed the cache tests on any disk over 90 % full.
double packed_cache_reserve_bytes(double filesystem_bytes) {
  constexpr double kGiB = double(1ull << 30);
  return std::clamp(0.05 * filesystem_bytes, 1 * kGiB, 4 * kGiB);
}

bool pack_into_cache(const std::string& dir, const gguf::GgufFile& file,
                     std::span<MatrixView* const> matrices, ThreadPool* pool, PackedStore& store,
                     std::string* note, FunctionRef<void(MatrixView*)> packed_one) {
  Header header;
  std::vector<Entry> entries;
  std::string source_path;
  if (!expected_contents(file, matrices, &header, &entries, &source_path, note)) return false;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *note = "cannot create " + dir + ": " + ec.message();
    return false;
  }
  // Leave room for others: never fill the disk to within packed_cache_reserve_bytes of full.
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const double free_bytes = double(vfs.f_bavail) * double(vfs.f_frsize);
    const double reserve = packed_cache_reserve_bytes(double(vfs.f_blocks) * double(vfs.f_frsize));
    if (free_bytes < double(header.file_size) + reserve) {
      *note = "not enough free space in " + dir + " (" + std::to_string(int64_t(free_bytes / (1 << 20))) +
              " MiB free, the copies need " + std::to_string(int64_t(header.file_size >> 20)) + " MiB + " +
              std::to_string(int64_t(reserve / (1 << 20))) + " MiB left free)";
      return false;
    }
  }
  const std::string path = packed_cache_path(dir, file.path());
  remove_abandoned_temporaries(path);
  remove_orphaned_caches(dir);
  const std::string tmp = temporary_path(path);
  Fd f{::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) {
    *note = "cannot create " + tmp + ": " + errno_text();
    return false;
  }
  // The blocks are reserved up front: a write through the mapping that found the disk full would kill
  // the process (SIGBUS) instead of failing a call.
  if (::fallocate(f.fd, 0, 0, off_t(header.file_size)) != 0) {
    *note = "cannot reserve " + std::to_string(header.file_size) + " bytes for " + tmp + ": " + errno_text();
    ::unlink(tmp.c_str());
    return false;
  }
  void* map = ::mmap(nullptr, header.file_size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (map == MAP_FAILED) {
    *note = "cannot map " + tmp + ": " + errno_text();
    ::unlink(tmp.c_str());
    return false;
  }
  store.adopt_mapping(map, header.file_size);
  ask_for_huge_pages(map, header.file_size);
  auto* base = static_cast<uint8_t*>(map);
  std::memcpy(base, &header, sizeof header);
  std::memcpy(base + sizeof header, entries.data(), entries.size() * sizeof(Entry));
  std::memcpy(base + sizeof header + entries.size() * sizeof(Entry), source_path.data(), source_path.size());
  for (size_t i = 0; i < matrices.size(); ++i) {
    pack_matrix(*matrices[i], base + entries[i].offset, pool);
    *matrices[i] = store.attach(*matrices[i], base + entries[i].offset);
    packed_one(matrices[i]);
  }
  ::mprotect(map, header.file_size, PROT_READ);  // from here on the copies are only read
  // Synced before the rename: a crash must never leave a complete-looking file with missing data.
  // The copies themselves are in memory either way; only keeping them for later loads can fail here.
  if (::msync(map, header.file_size, MS_SYNC) != 0 || ::fdatasync(f.fd) != 0) {
    *note = "packed, but the cache was not kept: cannot write " + tmp + ": " + errno_text();
    ::unlink(tmp.c_str());
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *note = "packed, but the cache was not kept: cannot rename " + tmp + " to " + path + ": " + errno_text();
    ::unlink(tmp.c_str());
  } else {
    *note = "written to " + path + " for later loads";
    // What the kernel wrote back and dropped while packing (a cache near the size of the memory) is
    // read back now, not fault by fault in the first tokens; and the file is clean now (synced), so
    // what is in small folios can be dropped and read again.
    ::madvise(map, header.file_size, MADV_POPULATE_READ);
    if (const std::string pages = settle_in_huge_pages(f.fd, map, header.file_size); !pages.empty()) {
      *note += "; " + pages;
    }
  }
  return true;
}

}  // namespace gem4
