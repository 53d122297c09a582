// The BPE merge table kept on disk between runs.
//
// With the real Gemma 4 vocabulary, building the merge table is most of a tokenizer's start: ~500k
// merges, three index lookups each, and 24 MiB of fresh memory (0.09-0.15 s of `gem4 run` on the target
// VMs, where the 14-token prompt then takes 0.13). Every Gemma 4 file carries the same vocabulary, so the
// first load writes `<dir>/vocab-<key>.gem4merges` and later loads map it: the table is used in place
// from the page cache, and only the slots a prompt probes are ever read.
//
// The key hashes the token and merge strings, so the name says what a file was made from. A file is
// used only if its header matches (magic, format version, byte order, key, the token and merge counts,
// sizes that add up to the file's) and the hash of everything after the header equals the one it
// records; anything else (missing, torn, truncated, altered, another version) means building the table
// as usual and writing the file again. Written under a temporary name, synced, then renamed, so readers
// see a complete file or none.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string_view>
#include <unordered_set>

#include "gguf/file_io.h"
#include "text/vocab.h"

namespace gem4::text {

namespace {

constexpr char kMagic[8] = {'G', 'E', 'M', '4', 'M', 'R', 'G', '\n'};
// Bumped whenever the layout below or the meaning of a merge slot changes.
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t byte_order;  // kByteOrder as the writer stored it
  uint64_t key;
  uint64_t n_tokens;
  uint64_t n_merge_strings;  // tokenizer.ggml.merges' length
  uint64_t n_symbols;        // the tokens, then the symbols merges made (their texts in the extra section)
  uint64_t n_merges;         // entries in the table
  uint64_t table_slots;      // a power of two
  uint64_t extra_bytes;      // between the header and the table, a multiple of 64
  uint64_t slot_bytes;       // sizeof(MergeSlot) of the writer
  uint64_t payload_hash;     // payload_hash() of the extra section and the table
  uint64_t reserved[5];
};
static_assert(sizeof(Header) == 128);

uint64_t payload_hash(std::string_view extra, std::string_view table) {
  const std::hash<std::string_view> hash;
  return hash(extra) * 0x9E3779B97F4A7C15ull ^ hash(table);
}

// The extra section: the symbols merges made (count, lengths, bytes), the 128 ASCII glue flags, the
// other glue characters (count, lengths, bytes); zeros up to a multiple of 64.
struct Extra {
  std::vector<std::string_view> symbols;
  bool ascii_glue[128] = {};
  std::vector<std::string_view> glue_chars;
};

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

void put_strings(std::string& out, const std::vector<std::string_view>& strings) {
  put_u32(out, static_cast<uint32_t>(strings.size()));
  for (std::string_view s : strings) put_u32(out, static_cast<uint32_t>(s.size()));
  for (std::string_view s : strings) out += s;
}

// Reads what put_strings wrote at `at`; false if it runs past the end.
bool get_strings(std::string_view in, size_t& at, std::vector<std::string_view>& strings) {
  uint32_t n = 0;
  if (in.size() - at < sizeof n) return false;
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if ((in.size() - at) / sizeof(uint32_t) < n) return false;
  std::vector<uint32_t> lengths(n);
  if (n > 0) std::memcpy(lengths.data(), in.data() + at, n * sizeof(uint32_t));  // (a null dst is UB)
  at += n * sizeof(uint32_t);
  strings.clear();
  for (uint32_t len : lengths) {
    if (in.size() - at < len) return false;
    strings.push_back(in.substr(at, len));
    at += len;
  }
  return true;
}

}  // namespace

bool Vocab::map_merge_cache(const MergeCacheRef& cache, size_t n_merge_strings, std::string* why) {
  const Fd fd(::open(cache.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    *why = errno == ENOENT ? "no cache file yet" : "cannot open " + cache.path + ": " + errno_text();
    return false;
  }
  struct stat st {};
  Header h{};
  if (::fstat(fd.fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof h) ||
      !read_exact(fd.fd, &h, sizeof h, 0)) {
    *why = "cache file " + cache.path + " unreadable or shorter than its header";
    return false;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const bool slots_fit = h.table_slots >= 16 && (h.table_slots & (h.table_slots - 1)) == 0 &&
                         h.table_slots < (uint64_t{1} << 40) && h.n_merges < h.table_slots;
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion ||
      h.byte_order != kByteOrder || h.slot_bytes != sizeof(MergeSlot)) {
    *why = "cache file " + cache.path + " is not one this build writes";
    return false;
  }
  if (h.key != cache.key || h.n_tokens != static_cast<uint64_t>(n_tokens_) ||
      h.n_merge_strings != n_merge_strings || h.n_symbols < h.n_tokens ||
      h.n_symbols >= uint64_t{INT32_MAX} || !slots_fit || h.extra_bytes % 64 != 0 ||
      h.extra_bytes > size - sizeof h ||
      size - sizeof h - h.extra_bytes != h.table_slots * sizeof(MergeSlot)) {
    *why = "cache file " + cache.path + " does not match this vocabulary or its own sizes";
    return false;
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.fd, 0);
  if (base == MAP_FAILED) {
    *why = "cannot map " + cache.path + ": " + errno_text();
    return false;
  }
  std::shared_ptr<const void> mapping(base, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  const char* bytes = static_cast<const char*>(base);
  const std::string_view extra(bytes + sizeof h, h.extra_bytes);
  const std::string_view table(bytes + sizeof h + h.extra_bytes, size - sizeof h - h.extra_bytes);
  if (payload_hash(extra, table) != h.payload_hash) {
    *why = "cache file " + cache.path + " is damaged (its contents do not hash to its header's value)";
    return false;
  }
  Extra x;
  size_t at = 0;
  bool ok = get_strings(extra, at, x.symbols) && x.symbols.size() == h.n_symbols - h.n_tokens &&
            extra.size() - at >= sizeof x.ascii_glue;
  if (ok) {
    std::memcpy(x.ascii_glue, extra.data() + at, sizeof x.ascii_glue);
    at += sizeof x.ascii_glue;
    ok = get_strings(extra, at, x.glue_chars);
  }
  // The symbols merges made must be new, each once: they get the ids after the tokens, in order.
  std::unordered_set<std::string_view> seen;
  for (size_t k = 0; ok && k < x.symbols.size(); ++k)
    ok = !x.symbols[k].empty() && seen.insert(x.symbols[k]).second && index_find(x.symbols[k]) == kNoToken;
  if (!ok) {
    *why = "cache file " + cache.path + " has an inconsistent symbol or glue section";
    return false;
  }

  for (std::string_view s : x.symbols) intern(s, symbol_hash(s));
  std::memcpy(ascii_glue_, x.ascii_glue, sizeof ascii_glue_);
  glue_chars_.assign(x.glue_chars.begin(), x.glue_chars.end());
  merge_table_ = reinterpret_cast<const MergeSlot*>(table.data());
  merge_mask_ = h.table_slots - 1;
  n_merges_ = static_cast<int>(h.n_merges);
  merge_cache_mapping_ = std::move(mapping);
  return true;
}

bool Vocab::write_merge_cache(const MergeCacheRef& cache, size_t n_merge_strings, std::string* why) const {
  Extra x;
  const int32_t n_symbols = static_cast<int32_t>(offsets_.size() - 1);
  for (int32_t sym = n_tokens_; sym < n_symbols; ++sym) x.symbols.push_back(symbol_text(sym));
  for (const std::string& c : glue_chars_) x.glue_chars.push_back(c);
  std::string extra;
  put_strings(extra, x.symbols);
  extra.append(reinterpret_cast<const char*>(ascii_glue_), sizeof ascii_glue_);
  put_strings(extra, x.glue_chars);
  extra.resize((extra.size() + 63) / 64 * 64, '\0');
  const std::string_view table(reinterpret_cast<const char*>(merge_slots_.data()),
                               merge_slots_.size() * sizeof(MergeSlot));

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.byte_order = kByteOrder;
  h.key = cache.key;
  h.n_tokens = static_cast<uint64_t>(n_tokens_);
  h.n_merge_strings = n_merge_strings;
  h.n_symbols = static_cast<uint64_t>(n_symbols);
  h.n_merges = static_cast<uint64_t>(n_merges_);
  h.table_slots = merge_slots_.size();
  h.extra_bytes = extra.size();
  h.slot_bytes = sizeof(MergeSlot);
  h.payload_hash = payload_hash(extra, table);

  const std::filesystem::path path(cache.path);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  remove_abandoned_temporaries(cache.path);
  const std::string tmp = temporary_path(cache.path);
  bool ok = false;
  {
    const Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.fd < 0) {
      *why = "cannot create " + tmp + ": " + errno_text();
      return false;
    }
    // Synced before the rename: a crash must never leave a complete-looking file with missing data.
    ok = write_exact(fd.fd, &h, sizeof h, 0) && write_exact(fd.fd, extra.data(), extra.size(), sizeof h) &&
         write_exact(fd.fd, table.data(), table.size(), sizeof h + extra.size()) && ::fsync(fd.fd) == 0;
    if (!ok) *why = "cannot write " + tmp + ": " + errno_text();
  }
  if (ok && ::rename(tmp.c_str(), cache.path.c_str()) != 0) {
    *why = "cannot rename " + tmp + " to " + cache.path + ": " + errno_text();
    ok = false;
  }
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace gem4::text
