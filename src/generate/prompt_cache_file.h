// Prompt-cache entries on disk: chains of KV chunks kept between runs, so a restarted process does not
// recompute the prompts (system prompt, documents, earlier turns) it has seen before.
//
// A chunk is the K/V rows of C consecutive positions of every KV layer, one opaque blob of chunk_bytes.
// Chunk i of a token sequence covers positions [i*C, (i+1)*C) and is valid for every sequence whose first
// (i+1)*C tokens are the same, so an entry (tokens plus the chunks of its first n_chunks*C positions) can
// hand out its first k chunks to any sequence that shares its first k*C tokens.
//
// One file per entry, `<16 hex digits of a hash of key and tokens>.gem4pc`. All integers little-endian:
//
//   Header (64 bytes)  magic "GEM4PCE\0", version, layout_bytes, model_id, chunk_bytes, chunk_tokens,
//                      n_chunks, n_tokens, file_size, meta_hash
//   layout             layout_bytes bytes (the key's layout string)
//   tokens             n_tokens int32 (n_tokens = n_chunks * chunk_tokens)
//   chunk hashes       n_chunks uint64: FNV-1a 64 of each chunk's bytes
//   (zeros to a multiple of 64)
//   chunk data         n_chunks * chunk_bytes
//
// meta_hash is FNV-1a 64 of the header (meta_hash read as 0), layout, tokens and chunk hashes: everything
// before the chunk data. The last use of an entry is its file's modification time (set on every load),
// so marking a use rewrites nothing and the checksums stay valid.
//
// A file is written under `<name>.tmp-<pid>-<n>`, synced, renamed, and the folder synced: readers see a
// complete entry or none, whichever process wrote it. Several processes may share a folder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gem4::gguf {
class GgufFile;
}

namespace gem4::generate {

// What an entry must match to be used: the model file's contents, the KV layout, the chunk shape.
struct PromptCacheKey {
  uint64_t model_id = 0;  // model_file_identity() of the GGUF file
  std::string layout;     // KV layout signature (cache type, layers, widths); opaque string, compared exactly
  int chunk_tokens = 64;
  size_t chunk_bytes = 0;  // bytes of one chunk blob

  bool operator==(const PromptCacheKey&) const = default;
};

// Identity of a GGUF file's contents, not its path (a copy has the same identity, an edited or other
// model another): file size, a hash of the header/metadata/tensor-info bytes and of 64 sampled 4 KiB
// blocks of the tensor data (all of it when it is at most 256 KiB). Throws std::runtime_error naming the
// file if it cannot be read.
uint64_t model_file_identity(const std::string& gguf_path);
// The same for a file already open (no second parse of its metadata).
uint64_t model_file_identity(const gguf::GgufFile& file);

struct PromptCacheEntryInfo {
  std::string path;
  size_t n_tokens = 0;
  int n_chunks = 0;
  uint64_t bytes = 0;          // the file's size
  int64_t last_used_unix = 0;  // seconds since 1970 (the file's modification time)
  // Intact header and tokens (the chunk data is checked when it is loaded) and the key of the folder's
  // owner; why_not says what is wrong otherwise ("damaged: ...", "other model ...", ...).
  bool usable = false;
  std::string why_not;
  bool damaged = false;  // the header, sizes or meta_hash are wrong: load() deletes such a file
  PromptCacheKey key;    // as the file states it (when not damaged)
};

// Every entry file in `dir` (none when it does not exist), judged against `key`, or only for damage when
// key is null (usable false, why_not "" for an intact entry). Reads headers and tokens, never deletes.
std::vector<PromptCacheEntryInfo> list_prompt_cache_dir(const std::string& dir, const PromptCacheKey* key);
// Removes every entry and temporary file of `dir`, whatever its key; a writer that is still busy then
// fails its save. Returns the entries removed. Files not named like entries are left alone.
int clear_prompt_cache_dir(const std::string& dir);

// The folder of entries, seen with one key. The calls may come from several threads (they take turns);
// other processes may write and delete entries in the folder at the same time.
class PromptCacheDir {
 public:
  // Opens (creating if needed) the folder; removes temporaries left by writers that died and entries
  // that are damaged. max_bytes: size cap of the folder's entries, all keys together (LRU eviction by
  // last use). Throws std::runtime_error naming the folder when it cannot be created or written, and
  // std::invalid_argument for a key without chunk_tokens or chunk_bytes.
  PromptCacheDir(std::string dir, PromptCacheKey key, uint64_t max_bytes);

  // Saves tokens[0, n_chunks*C) with the chunks get_chunk(i, dst) writes (dst has chunk_bytes). Skips
  // (returns false, *why) when an entry of this key already covers that prefix; an existing entry that is
  // a strict prefix of the new one is replaced. Written atomically; never leaves a partial entry under its
  // final name. Evicts least recently used entries past the cap (refuses an entry larger than the cap).
  // Never throws for I/O errors: returns false with *why. An exception from get_chunk is passed on (no
  // file is left).
  bool save(const std::vector<int32_t>& tokens, int n_chunks,
            const std::function<void(int, uint8_t*)>& get_chunk, std::string* why = nullptr);

  // Finds the usable entry sharing the most whole chunks with `tokens` (at most max_chunks), verifies
  // everything it hands out (header, sizes, meta_hash, tokens, each chunk's hash) before handing out
  // anything, then calls put_chunk(i, data) for i = 0..n-1 and returns n. A damaged entry is deleted and
  // the next best one tried; an entry of another key is skipped. Marks the entry used. 0 when none is
  // usable (*why says why when an entry was rejected). Should the file change between the check and the
  // hand-out (someone editing it in place), the chunks handed out until then (each checked again) count.
  // Entries sharing no more than `more_than` chunks are not read (the caller has those already).
  int load(const std::vector<int32_t>& tokens, int max_chunks,
           const std::function<void(int, const uint8_t*)>& put_chunk, std::string* why = nullptr,
           int more_than = 0);

  std::vector<PromptCacheEntryInfo> list() const;  // all entries in the folder, usable with this key or not
  void clear();                                    // removes every entry (and temporaries) of the folder

  const std::string& dir() const { return dir_; }
  const PromptCacheKey& key() const { return key_; }

 private:
  // What the folder held at the last refresh: read again only for files that are new or were replaced.
  struct Known {
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
    bool ours = false;  // intact and of this key
    int n_chunks = 0;
    std::vector<uint64_t> prefix_hash;  // [i]: hash of tokens [0, (i+1)*C), when ours
  };
  void refresh(std::string* notes);
  void evict(const std::string& keep, std::string* notes);
  // Checks entry `name` for `tokens` and hands out up to `shared` chunks: the count, 0 when the file is
  // gone or shares nothing after all, -1 when it was damaged (then deleted, *note says why).
  int load_from(const std::string& name, const std::vector<int32_t>& tokens, int shared,
                const std::function<void(int, const uint8_t*)>& put_chunk, std::string* note);
  std::vector<uint64_t> prefix_hashes(const std::vector<int32_t>& tokens, int n_chunks) const;

  std::string dir_;
  PromptCacheKey key_;
  uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, Known> known_;  // by file name
  uint64_t temp_seq_ = 0;
};

}  // namespace gem4::generate
