// Packed copies of a GGUF file's matrices, kept on disk between runs.
//
// Packing an E2B Q4_0 file makes 1.28 GiB of new anonymous memory at every start. Touching that much
// fresh memory costs the kernel 0.6 s on the target VMs, and several seconds when the host is slow to
// hand pages over; the same bytes read back from a file in the page cache map in about 0.1 s. So the
// first load of a file packs into `<dir>/<file name>-<hash of its path>.gem4pack` (a shared mapping of
// it, so the fresh memory is paid once, not for a copy in memory and again for writing it out), and
// later loads map that file instead of packing.
//
// A cache file is used only if everything it was made from still holds: the GGUF file's size,
// modification time, inode and device; each matrix's position in it, type and shape; and the packed
// layouts themselves (packed_layout_fingerprint(), so a build whose layout changed repacks). Anything
// else (missing, stale, truncated, unreadable) means packing as usual and rewriting the file. A file is
// written under a temporary name, synced, then renamed, so readers see a complete file or none. A writer
// also removes the temporaries of writers that died, and the caches of GGUF files that no longer exist
// (each cache records its file's path).
#pragma once
#include <span>
#include <string>

#include "kernels/function_ref.h"
#include "kernels/matmul.h"
#include "kernels/packed_matrix.h"

namespace gem4 {

class ThreadPool;

namespace gguf {
class GgufFile;
}

// The cache folder when the user names none: $GEM4_PACK_CACHE if set ("off" or "" turns the cache off),
// else $XDG_CACHE_HOME/gem4, else $HOME/.cache/gem4; "" (off) when none of them is set.
std::string default_packed_cache_dir();

// Where the cache file of `gguf_path` lives in `dir`.
std::string packed_cache_path(const std::string& dir, const std::string& gguf_path);

// Tries to map the cache file of `file` from `dir`: on success sets each matrix's `packed` to its copy
// (the mapping is kept by `store`) and returns true. On failure leaves everything as it was, returns
// false and says why in *why ("no cache file yet", "made from another version of the file", ...).
// Parts of the file the page cache holds in 4 KiB folios are read again in 2 MiB ones where the kernel
// can (gguf/huge_pages.h; a writer does the same once its file is synced); *pages_note, if given, says
// so ("" when there was nothing to do).
bool map_packed_cache(const std::string& dir, const gguf::GgufFile& file,
                      std::span<MatrixView* const> matrices, PackedStore& store, std::string* why,
                      std::string* pages_note = nullptr);

// Like map_packed_cache, but reads the copies into this process's own memory (2 MiB pages from
// allocate_large, kept by `store`) instead of mapping the file, `pool`'s threads reading 64 MiB pieces in
// parallel. Costs a copy at every load (0.23-4.0 s for an E2B Q4_0 file's 1.3 GiB on the target VMs,
// most of it the host handing over fresh memory) and the memory of a second copy while the page cache
// keeps the file. Why one would: on a VM the memory under a page cache that has held a file for a while
// can read slower than fresh memory (on a Firecracker VM, plain reads of a long-cached E2B Q8_0 cache ran at
// 17 GB/s where the same bytes copied into fresh memory read at 23; decode 20.1-20.8 against 24.3-25.7 GB/s).
bool read_packed_cache(const std::string& dir, const gguf::GgufFile& file,
                       std::span<MatrixView* const> matrices, ThreadPool* pool, PackedStore& store,
                       std::string* why);

// Packs `matrices` (all from `file`) straight into a new cache file of `file` in `dir`, through a
// shared mapping of it, so the copies are made once, in the page cache, and this process reads them
// from there like later loads; then syncs the file and renames it into place. Returns false (with
// *note saying why, nothing packed, no file left behind) when the file cannot be made: a folder that
// cannot be created, less free space than the copies plus a reserve, no fallocate. Returns true once
// the copies are made, each matrix's `packed` pointing into the mapping kept by `store`; *note then
// says whether the file was kept for later loads. `packed_one` is called with each matrix as soon as its
// copy is made (the loader drops the matrix's pages of the GGUF mapping there).
bool pack_into_cache(const std::string& dir, const gguf::GgufFile& file,
                     std::span<MatrixView* const> matrices, ThreadPool* pool, PackedStore& store,
                     std::string* note, FunctionRef<void(MatrixView*)> packed_one);

// The free space a cache file must leave on a filesystem of `filesystem_bytes`: 5 % of it, at least
// 1 GiB and at most 4 GiB.
double packed_cache_reserve_bytes(double filesystem_bytes);

}  // namespace gem4
