#include "generate/prompt_cache_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <tuple>

#include "gguf/gguf.h"
#include "gguf/file_io.h"
#include "kernels/fnv1a.h"

namespace gem4::generate {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'G', 'E', 'M', '4', 'P', 'C', 'E', '\0'};
constexpr uint32_t kVersion = 1;
constexpr const char* kExt = ".gem4pc";
constexpr const char* kTempInfix = ".gem4pc.tmp-";

// Bounds on what a file may state, far above any real entry (Gemma 4 contexts are at most 256 Ki
// tokens), so that a hostile header cannot make a reader allocate much: the tokens of an entry take at
// most 16 MiB.
constexpr uint32_t kMaxLayoutBytes = 1u << 16;
constexpr uint32_t kMaxChunkTokens = 1u << 20;
constexpr uint64_t kMaxTokens = 1ull << 22;
constexpr uint64_t kMaxChunkBytes = 1ull << 40;
// A temporary whose writer still seems to run is removed anyway after this long: its PID may belong to
// another process by now, or to another PID namespace sharing the folder.
constexpr int64_t kTempMaxAgeSeconds = 24 * 3600;

// The file's first bytes. All integers little-endian (the only byte order gem4 runs on).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t layout_bytes;
  uint64_t model_id;
  uint64_t chunk_bytes;
  uint32_t chunk_tokens;
  uint32_t n_chunks;
  uint64_t n_tokens;
  uint64_t file_size;
  uint64_t meta_hash;  // FNV-1a of everything before the chunk data, this field read as 0
};
static_assert(sizeof(Header) == 64);

// Where the parts of an entry lie; false when the sizes overflow or exceed the bounds above.
struct Layout {
  uint64_t meta_end = 0;     // end of the chunk hashes
  uint64_t data_offset = 0;  // chunk data, 64-byte aligned
  uint64_t file_size = 0;
};
bool layout_of(uint64_t layout_bytes, uint64_t n_chunks, uint64_t chunk_tokens, uint64_t chunk_bytes,
               Layout* out) {
  if (layout_bytes > kMaxLayoutBytes || chunk_tokens == 0 || chunk_tokens > kMaxChunkTokens ||
      n_chunks == 0 || n_chunks > kMaxTokens || chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes) {
    return false;
  }
  const uint64_t n_tokens = n_chunks * chunk_tokens;  // < 2^42: no overflow
  if (n_tokens > kMaxTokens) return false;
  out->meta_end = sizeof(Header) + layout_bytes + 4 * n_tokens + 8 * n_chunks;
  out->data_offset = (out->meta_end + 63) / 64 * 64;
  uint64_t data = 0;
  if (__builtin_mul_overflow(n_chunks, chunk_bytes, &data)) return false;
  return !__builtin_add_overflow(out->data_offset, data, &out->file_size);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool is_entry_name(const std::string& name) {
  return name.size() > std::strlen(kExt) && ends_with(name, kExt);
}
bool is_temp_name(const std::string& name) { return name.find(kTempInfix) != std::string::npos; }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int64_t mtime_ns(const struct stat& st) {
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Opens an entry for reading. O_NONBLOCK and the regular-file check keep a FIFO or device that happens
// to carry the name from hanging or feeding a reader; O_NOFOLLOW keeps it inside the folder. -1 (and
// nothing to judge) when the file is gone or is not a regular file.
int open_entry(const std::string& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything of an entry but its chunk data.
struct Parsed {
  PromptCacheKey key;
  int n_chunks = 0;
  std::vector<int32_t> tokens;
  std::vector<uint64_t> chunk_hash;
  uint64_t data_offset = 0;
};

// Reads and checks the header, sizes, layout, tokens and chunk hashes of the open entry `fd`; false
// with *why when anything is wrong (the file is then damaged, whatever its key).
bool read_entry(int fd, const struct stat& st, Parsed* out, std::string* why) {
  Header h{};
  if (uint64_t(st.st_size) < sizeof h || !read_exact(fd, &h, sizeof h, 0)) {
    *why = "shorter than its header";
    return false;
  }
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    *why = "not a gem4 prompt-cache entry (bad magic)";
    return false;
  }
  if (h.version != kVersion) {
    *why = "format version " + std::to_string(h.version) + ", this gem4 reads " + std::to_string(kVersion);
    return false;
  }
  Layout l;
  if (!layout_of(h.layout_bytes, h.n_chunks, h.chunk_tokens, h.chunk_bytes, &l) ||
      h.n_tokens != uint64_t(h.n_chunks) * h.chunk_tokens || h.file_size != l.file_size) {
    *why = "its header's sizes are out of bounds or do not add up";
    return false;
  }
  if (uint64_t(st.st_size) != l.file_size) {
    *why = (uint64_t(st.st_size) < l.file_size ? "truncated: " : "too long: ") + std::to_string(st.st_size) +
           " bytes, its header says " + std::to_string(l.file_size);
    return false;
  }
  // Bounded by the checks above (under 50 MiB) and by the file's real size.
  std::vector<uint8_t> meta(l.meta_end - sizeof h);
  if (!read_exact(fd, meta.data(), meta.size(), sizeof h)) {
    *why = "cannot read its tokens: " + errno_text();
    return false;
  }
  Header zeroed = h;
  zeroed.meta_hash = 0;
  if (fnv1a(meta.data(), meta.size(), fnv1a(&zeroed, sizeof zeroed)) != h.meta_hash) {
    *why = "its header, tokens or chunk checksums fail their checksum";
    return false;
  }
  const uint8_t* p = meta.data();
  out->key.model_id = h.model_id;
  out->key.layout.assign(reinterpret_cast<const char*>(p), h.layout_bytes);
  out->key.chunk_tokens = int(h.chunk_tokens);
  out->key.chunk_bytes = size_t(h.chunk_bytes);
  p += h.layout_bytes;
  out->n_chunks = int(h.n_chunks);
  out->tokens.resize(h.n_tokens);
  std::memcpy(out->tokens.data(), p, h.n_tokens * 4);
  p += h.n_tokens * 4;
  out->chunk_hash.resize(h.n_chunks);
  std::memcpy(out->chunk_hash.data(), p, uint64_t(h.n_chunks) * 8);
  out->data_offset = l.data_offset;
  return true;
}

// Why an entry of key `have` cannot serve `want` ("" when it can).
std::string key_mismatch(const PromptCacheKey& have, const PromptCacheKey& want) {
  if (have.model_id != want.model_id) return "other model (id " + hex64(have.model_id) + ")";
  if (have.layout != want.layout) return "other KV layout (\"" + have.layout + "\")";
  if (have.chunk_tokens != want.chunk_tokens)
    return "other chunk size (" + std::to_string(have.chunk_tokens) + " tokens)";
  if (have.chunk_bytes != want.chunk_bytes)
    return "other chunk size (" + std::to_string(have.chunk_bytes) + " bytes)";
  return "";
}

// Removes `path` if it still is the file that was judged (another process may have renamed a fresh
// entry over it since).
void remove_if_same(const std::string& path, const struct stat& judged) {
  struct stat now {};
  if (::lstat(path.c_str(), &now) == 0 && now.st_dev == judged.st_dev && now.st_ino == judged.st_ino) {
    ::unlink(path.c_str());
  }
}

// Removes the temporaries of writers that died mid-write (PID no longer running, or the file untouched
// for a day): each can be as large as an entry, and nothing else would ever remove them.
void remove_dead_temporaries(const std::string& dir) {
  std::error_code ec;
  const int64_t now = int64_t(std::time(nullptr));
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.find(kTempInfix);
    if (at == std::string::npos) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + at + std::strlen(kTempInfix), &end, 10);
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const bool writer_alive = pid > 0 && *end == '-' && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
    if (!writer_alive || now - int64_t(st.st_mtim.tv_sec) > kTempMaxAgeSeconds) ::unlink(e.path().c_str());
  }
}

void append_note(std::string* notes, const std::string& note) {
  if (!notes || note.empty()) return;
  if (!notes->empty()) *notes += "; ";
  *notes += note;
}

std::string entry_file_name(const PromptCacheKey& key, const int32_t* tokens, size_t n_tokens) {
  uint64_t h = fnv1a(&key.model_id, sizeof key.model_id);
  const uint64_t shape[3] = {key.layout.size(), uint64_t(key.chunk_tokens), uint64_t(key.chunk_bytes)};
  h = fnv1a(shape, sizeof shape, h);
  h = fnv1a(key.layout.data(), key.layout.size(), h);
  h = fnv1a(&n_tokens, sizeof n_tokens, h);
  h = fnv1a(tokens, n_tokens * 4, h);
  return hex64(h) + kExt;
}

}  // namespace

uint64_t model_file_identity(const gguf::GgufFile& file) {
  constexpr uint64_t kBlock = 4096, kBlocks = 64;
  const uint8_t* image = file.image();
  const uint64_t size = file.file_size();
  const uint64_t data_offset = std::min<uint64_t>(file.data_offset(), size);
  uint64_t h = fnv1a(&size, sizeof size);
  h = fnv1a(image, data_offset, h);
  const uint64_t data = size - data_offset;
  if (data <= kBlock * kBlocks) return fnv1a(image + data_offset, data, h);
  // Evenly spaced, first and last block included: a requantised or retrained file differs nearly
  // everywhere, and reading 256 KiB keeps this cheap for files of gigabytes.
  for (uint64_t k = 0; k < kBlocks; ++k) {
    h = fnv1a(image + data_offset + (data - kBlock) * k / (kBlocks - 1), kBlock, h);
  }
  return h;
}

uint64_t model_file_identity(const std::string& gguf_path) {
  // GgufError is a std::runtime_error and names the file.
  return model_file_identity(*gguf::GgufFile::open(gguf_path));
}

std::vector<PromptCacheEntryInfo> list_prompt_cache_dir(const std::string& dir, const PromptCacheKey* key) {
  std::vector<PromptCacheEntryInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_entry_name(name)) continue;
    struct stat st {};
    Fd f{open_entry(e.path().string(), &st)};
    if (f.fd < 0) continue;
    PromptCacheEntryInfo info;
    info.path = e.path().string();
    info.bytes = uint64_t(st.st_size);
    info.last_used_unix = int64_t(st.st_mtim.tv_sec);
    Parsed p;
    std::string why;
    if (!read_entry(f.fd, st, &p, &why)) {
      info.damaged = true;
      info.why_not = "damaged: " + why;
    } else {
      info.key = p.key;
      info.n_tokens = p.tokens.size();
      info.n_chunks = p.n_chunks;
      if (key) {
        info.why_not = key_mismatch(p.key, *key);
        info.usable = info.why_not.empty();
      }
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const PromptCacheEntryInfo& a, const PromptCacheEntryInfo& b) {
    return std::tie(b.last_used_unix, a.path) < std::tie(a.last_used_unix, b.path);  // most recent first
  });
  return out;
}

int clear_prompt_cache_dir(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool entry = is_entry_name(name);
    if (!entry && !is_temp_name(name)) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(e.path().c_str()) == 0 && entry) ++removed;
  }
  return removed;
}

PromptCacheDir::PromptCacheDir(std::string dir, PromptCacheKey key, uint64_t max_bytes)
    : dir_(std::move(dir)), key_(std::move(key)), max_bytes_(max_bytes) {
  if (key_.chunk_tokens <= 0 || uint32_t(key_.chunk_tokens) > kMaxChunkTokens || key_.chunk_bytes == 0 ||
      key_.chunk_bytes > kMaxChunkBytes || key_.layout.size() > kMaxLayoutBytes) {
    throw std::invalid_argument("prompt cache: a key needs 1.." + std::to_string(kMaxChunkTokens) +
                                " chunk tokens, a chunk size and a layout of at most 64 KiB");
  }
  if (dir_.empty()) throw std::runtime_error("prompt cache: no folder given");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    throw std::runtime_error("prompt cache: cannot create the folder " + dir_ + ": " +
                             (ec ? ec.message() : std::string("not a directory")));
  }
  if (::access(dir_.c_str(), W_OK | X_OK) != 0) {
    throw std::runtime_error("prompt cache: cannot write in the folder " + dir_ + ": " + errno_text());
  }
  remove_dead_temporaries(dir_);
  std::lock_guard lock(mu_);
  refresh(nullptr);
}

std::vector<uint64_t> PromptCacheDir::prefix_hashes(const std::vector<int32_t>& tokens, int n_chunks) const {
  std::vector<uint64_t> out(size_t(std::max(n_chunks, 0)));
  uint64_t h = kFnv1aOffsetBasis;
  const size_t c = size_t(key_.chunk_tokens);
  for (size_t i = 0; i < out.size(); ++i) out[i] = h = fnv1a(tokens.data() + i * c, c * 4, h);
  return out;
}

// One readdir and one lstat per file; a header is read only for a file not seen before or replaced
// since (another dev/inode/size), so refreshing before every load and save stays cheap.
void PromptCacheDir::refresh(std::string* notes) {
  std::error_code ec;
  std::set<std::string> seen;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_entry_name(name)) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (auto it = known_.find(name); it != known_.end() && it->second.dev == uint64_t(st.st_dev) &&
                                     it->second.ino == uint64_t(st.st_ino) &&
                                     it->second.size == uint64_t(st.st_size)) {
      it->second.mtime_ns = mtime_ns(st);
      seen.insert(name);
      continue;
    }
    Fd f{open_entry(e.path().string(), &st)};
    if (f.fd < 0) continue;
    Parsed p;
    std::string why;
    if (!read_entry(f.fd, st, &p, &why)) {
      remove_if_same(e.path().string(), st);
      append_note(notes, name + ": damaged (" + why + "), deleted");
      known_.erase(name);
      continue;
    }
    Known k;
    k.dev = uint64_t(st.st_dev), k.ino = uint64_t(st.st_ino), k.size = uint64_t(st.st_size);
    k.mtime_ns = mtime_ns(st);
    k.ours = p.key == key_;
    k.n_chunks = p.n_chunks;
    if (k.ours) k.prefix_hash = prefix_hashes(p.tokens, p.n_chunks);
    known_[name] = std::move(k);
    seen.insert(name);
  }
  std::erase_if(known_, [&](const auto& kv) { return !seen.count(kv.first); });
}

void PromptCacheDir::evict(const std::string& keep, std::string* notes) {
  uint64_t total = 0;
  std::vector<std::tuple<int64_t, std::string>> by_age;
  for (const auto& [name, k] : known_) {
    total += k.size;
    if (name != keep) by_age.emplace_back(k.mtime_ns, name);
  }
  std::sort(by_age.begin(), by_age.end());
  int evicted = 0;
  for (const auto& [mtime, name] : by_age) {
    if (total <= max_bytes_) break;
    ::unlink((dir_ + "/" + name).c_str());  // gone already (another process) is as good
    total -= known_[name].size;
    known_.erase(name);
    ++evicted;
  }
  if (evicted) append_note(notes, "evicted " + std::to_string(evicted) + " least recently used entries");
}

bool PromptCacheDir::save(const std::vector<int32_t>& tokens, int n_chunks,
                          const std::function<void(int, uint8_t*)>& get_chunk, std::string* why) {
  std::lock_guard lock(mu_);
  std::string notes;
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const size_t c = size_t(key_.chunk_tokens);
  if (n_chunks <= 0) return fail("nothing to save (no whole chunk)");
  if (tokens.size() / c < size_t(n_chunks)) {
    return fail(std::to_string(n_chunks) + " chunks need " + std::to_string(n_chunks * c) + " tokens, got " +
                std::to_string(tokens.size()));
  }
  Layout l;
  if (!layout_of(key_.layout.size(), uint64_t(n_chunks), c, key_.chunk_bytes, &l)) {
    return fail("an entry of " + std::to_string(n_chunks) + " chunks is larger than this format allows");
  }
  if (l.file_size > max_bytes_) {
    return fail("an entry of " + std::to_string(l.file_size) + " bytes is larger than the cache's cap of " +
                std::to_string(max_bytes_));
  }
  refresh(&notes);
  const std::vector<uint64_t> hashes = prefix_hashes(tokens, n_chunks);
  std::vector<std::string> replaced;
  for (const auto& [name, k] : known_) {
    if (!k.ours) continue;
    if (k.n_chunks >= n_chunks && k.prefix_hash[size_t(n_chunks) - 1] == hashes.back()) {
      return fail("already saved: " + name + " covers these " + std::to_string(n_chunks) + " chunks");
    }
    if (k.n_chunks < n_chunks && k.prefix_hash.back() == hashes[size_t(k.n_chunks) - 1])
      replaced.push_back(name);
  }

  const size_t n_tokens = size_t(n_chunks) * c;
  const std::string name = entry_file_name(key_, tokens.data(), n_tokens);
  const std::string path = dir_ + "/" + name;
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(temp_seq_++);
  // Removes the temporary on every way out but the rename, an exception from get_chunk included.
  struct Temp {
    const std::string& path;
    bool kept = false;
    ~Temp() {
      if (!kept) ::unlink(path.c_str());
    }
  };
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (f.fd < 0) return fail("cannot create " + tmp + ": " + errno_text());
  Temp guard{tmp};
  // Reserving the blocks first turns a full disk into one clear error before any chunk is computed.
  if (::fallocate(f.fd, 0, 0, off_t(l.file_size)) != 0 && errno != EOPNOTSUPP) {
    return fail("cannot reserve " + std::to_string(l.file_size) + " bytes for " + tmp + ": " + errno_text());
  }
  // The chunk data goes first, so that each chunk's hash is known when the header is written.
  std::vector<uint8_t> chunk(key_.chunk_bytes);
  std::vector<uint64_t> chunk_hash(static_cast<size_t>(n_chunks));
  for (int i = 0; i < n_chunks; ++i) {
    get_chunk(i, chunk.data());
    chunk_hash[size_t(i)] = fnv1a(chunk.data(), chunk.size());
    if (!write_exact(f.fd, chunk.data(), chunk.size(), l.data_offset + uint64_t(i) * chunk.size())) {
      return fail("cannot write " + tmp + ": " + errno_text());
    }
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.layout_bytes = uint32_t(key_.layout.size());
  h.model_id = key_.model_id;
  h.chunk_bytes = key_.chunk_bytes;
  h.chunk_tokens = uint32_t(c);
  h.n_chunks = uint32_t(n_chunks);
  h.n_tokens = n_tokens;
  h.file_size = l.file_size;
  std::vector<uint8_t> meta(l.data_offset, 0);
  uint8_t* p = meta.data() + sizeof h;
  std::memcpy(p, key_.layout.data(), key_.layout.size());
  p += key_.layout.size();
  std::memcpy(p, tokens.data(), n_tokens * 4);
  p += n_tokens * 4;
  std::memcpy(p, chunk_hash.data(), chunk_hash.size() * 8);
  h.meta_hash = fnv1a(meta.data() + sizeof h, l.meta_end - sizeof h, fnv1a(&h, sizeof h));
  std::memcpy(meta.data(), &h, sizeof h);
  if (!write_exact(f.fd, meta.data(), meta.size(), 0))
    return fail("cannot write " + tmp + ": " + errno_text());
  // Synced before the rename: a crash must never leave a complete-looking entry with missing data.
  if (::fdatasync(f.fd) != 0) return fail("cannot write " + tmp + ": " + errno_text());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail("cannot rename " + tmp + " to " + path + ": " + errno_text());
  }
  guard.kept = true;
  // The rename itself is durable only once the folder is synced.
  if (Fd d{::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)}; d.fd >= 0) ::fsync(d.fd);

  for (const std::string& old : replaced) {
    ::unlink((dir_ + "/" + old).c_str());
    known_.erase(old);
  }
  if (!replaced.empty())
    append_note(&notes, "replaced " + std::to_string(replaced.size()) + " shorter entries");
  struct stat st {};
  if (::fstat(f.fd, &st) == 0) {
    Known k;
    k.dev = uint64_t(st.st_dev), k.ino = uint64_t(st.st_ino), k.size = uint64_t(st.st_size);
    k.mtime_ns = mtime_ns(st);
    k.ours = true;
    k.n_chunks = n_chunks;
    k.prefix_hash = hashes;
    known_[name] = std::move(k);
  }
  evict(name, &notes);
  if (why) *why = notes;
  return true;
}

int PromptCacheDir::load_from(const std::string& name, const std::vector<int32_t>& tokens, int shared,
                              const std::function<void(int, const uint8_t*)>& put_chunk, std::string* note) {
  const std::string path = dir_ + "/" + name;
  struct stat st {};
  Fd f{open_entry(path, &st)};
  if (f.fd < 0) {
    known_.erase(name);
    return 0;
  }
  Parsed p;
  std::string why;
  auto damaged = [&](const std::string& reason) {
    remove_if_same(path, st);
    known_.erase(name);
    append_note(note, name + ": damaged (" + reason + "), deleted");
    return -1;
  };
  if (!read_entry(f.fd, st, &p, &why)) return damaged(why);
  if (p.key != key_) return 0;  // replaced by another process since the refresh: not ours to judge
  // The index compared hashes of the tokens; the hand-out goes by the tokens themselves.
  const size_t c = size_t(key_.chunk_tokens);
  int n = 0;
  while (n < std::min(shared, p.n_chunks) &&
         std::equal(tokens.begin() + ptrdiff_t(n * c), tokens.begin() + ptrdiff_t((n + 1) * c),
                    p.tokens.begin() + ptrdiff_t(n * c))) {
    ++n;
  }
  if (n == 0) return 0;
  std::vector<uint8_t> chunk(key_.chunk_bytes);
  auto read_chunk = [&](int i) {
    return read_exact(f.fd, chunk.data(), chunk.size(), p.data_offset + uint64_t(i) * chunk.size()) &&
           fnv1a(chunk.data(), chunk.size()) == p.chunk_hash[size_t(i)];
  };
  // Every chunk is checked before the first is handed out: a caller must never get the start of an
  // entry whose later chunks turn out damaged.
  for (int i = 0; i < n; ++i) {
    if (!read_chunk(i))
      return damaged("chunk " + std::to_string(i) + " fails its checksum or cannot be read");
  }
  int handed = 0;
  // Read again for the hand-out rather than kept: an entry may be gigabytes. Checked again too, so that
  // even a file edited in place since the first pass hands out only chunks that match their hashes.
  while (handed < n && read_chunk(handed)) {
    put_chunk(handed, chunk.data());
    ++handed;
  }
  if (handed < n)
    append_note(note, name + ": changed while being read; " + std::to_string(handed) + " chunks used");
  ::futimens(f.fd, nullptr);  // the last use, for eviction
  if (::fstat(f.fd, &st) == 0) {
    if (auto it = known_.find(name); it != known_.end()) it->second.mtime_ns = mtime_ns(st);
  }
  return handed;
}

int PromptCacheDir::load(const std::vector<int32_t>& tokens, int max_chunks,
                         const std::function<void(int, const uint8_t*)>& put_chunk, std::string* why,
                         int more_than) {
  std::lock_guard lock(mu_);
  std::string notes;
  const int n_query =
      int(std::min<size_t>(tokens.size() / size_t(key_.chunk_tokens), size_t(std::max(max_chunks, 0))));
  if (why) why->clear();
  if (n_query == 0) return 0;
  refresh(&notes);
  const std::vector<uint64_t> query = prefix_hashes(tokens, n_query);
  std::vector<std::tuple<int, int64_t, std::string>> candidates;  // shared chunks, last use, name
  for (const auto& [name, k] : known_) {
    if (!k.ours) continue;
    int shared = 0;
    while (shared < std::min(n_query, k.n_chunks) && k.prefix_hash[size_t(shared)] == query[size_t(shared)])
      ++shared;
    if (shared > std::max(more_than, 0)) candidates.emplace_back(shared, k.mtime_ns, name);
  }
  std::sort(candidates.rbegin(), candidates.rend());  // most shared first, then the most recently used
  int n = 0;
  for (const auto& [shared, mtime, name] : candidates) {
    if ((n = load_from(name, tokens, shared, put_chunk, &notes)) > 0) break;
  }
  if (n <= 0 && notes.empty()) notes = "no entry of this key shares the first chunk";
  if (why) *why = notes;
  return std::max(n, 0);
}

std::vector<PromptCacheEntryInfo> PromptCacheDir::list() const {
  std::lock_guard lock(mu_);
  return list_prompt_cache_dir(dir_, &key_);
}

void PromptCacheDir::clear() {
  std::lock_guard lock(mu_);
  clear_prompt_cache_dir(dir_);
  known_.clear();
}

}  // namespace gem4::generate
