// The Gemma 4 vocabulary as llama.cpp sees it after loading: token strings, types and attributes,
// special ids, the end-of-generation set, and the BPE merge table.
//
// Nothing here knows a token id in advance. Special ids come from the file's keys, and the few
// tokens that llama.cpp recognises by their text (the EOG tokens, EOT/FIM detection) are looked up
// by text, exactly as llama.cpp's llama_vocab::impl::load does. For the real Gemma 4 vocabulary this
// gives EOG = {1 <eos>, 50 <|tool_response>, 106 <turn|>} and makes <|tool_response> CONTROL.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/large_alloc.h"

namespace gem4::gguf {
class GgufFile;
class ValueArray;
}  // namespace gem4::gguf

namespace gem4::text {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Token types as stored in `tokenizer.ggml.token_type` (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Token attributes: a bit set, derived from the type and then amended at load time (llama.cpp's
// llama_token_attr). A token can be USER_DEFINED and CONTROL at once (<|tool_response>).
namespace attr {
constexpr uint32_t kUndefined = 0;
constexpr uint32_t kUnknown = 1u << 0;
constexpr uint32_t kUnused = 1u << 1;
constexpr uint32_t kNormal = 1u << 2;
constexpr uint32_t kControl = 1u << 3;
constexpr uint32_t kUserDefined = 1u << 4;
constexpr uint32_t kByte = 1u << 5;
}  // namespace attr

constexpr int32_t kNoToken = -1;

// Special ids as given by the file's keys (kNoToken when absent or out of range). EOT, EOM and the
// FIM ids may also be detected by token text at load time.
struct SpecialIds {
  int32_t bos = kNoToken, eos = kNoToken, unk = kNoToken, sep = kNoToken, pad = kNoToken, mask = kNoToken,
          eot = kNoToken, eom = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken, fim_pad = kNoToken, fim_rep = kNoToken,
          fim_sep = kNoToken;
};

// The vocabulary in file form: what `from_gguf` reads, or what a test builds by hand.
struct VocabData {
  std::string source = "<memory>";  // file path, for error messages
  std::string model = "gemma4";     // tokenizer.ggml.model
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, in id order
  std::vector<int32_t> types;       // tokenizer.ggml.token_type (empty: all NORMAL)
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "left right", rank = index
  SpecialIds special;
  bool add_bos = true;  // llama.cpp forces it on for gemma4 whatever the file says
  bool add_eos = false;
  bool add_space_prefix = false;  // read but unused: llama.cpp's BPE path never adds a prefix
};

// One BPE merge: `rank` orders merges (lower first), `result` is the symbol the pair becomes.
struct Merge {
  int32_t rank;
  int32_t result;
};

class Vocab {
 public:
  // Applies llama.cpp's load-time rules (attributes, EOG set, special-token list) and builds the
  // lookup tables. Throws TokenizerError on an unusable vocabulary (unknown model, duplicates...).
  explicit Vocab(VocabData data);
  // Reads the tokenizer.ggml.* keys of `file`; the tokens and merges are read in place, not copied
  // (the real vocabulary has ~800k of them). Throws TokenizerError naming the file and key.
  // With a `merge_cache_dir`, the BPE merge table is kept there between runs (vocab_cache.cpp): mapped
  // from a file made by an earlier run from the same tokens and merges, else built and written there.
  explicit Vocab(const gguf::GgufFile& file, const std::string& merge_cache_dir = "");
  Vocab(const Vocab&) = delete;  // merge_table_ points into its own storage
  Vocab& operator=(const Vocab&) = delete;

  int n_tokens() const { return n_tokens_; }
  bool valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
  const std::string& source() const { return source_; }

  // Raw token text as stored (spaces as U+2581, byte tokens as <0xXX>). Throws on a bad id.
  std::string_view text(int32_t id) const;
  // Decoded bytes of a token: U+2581 -> ' ', <0xXX> -> that byte, CONTROL / USER_DEFINED /
  // UNKNOWN written out verbatim; UNUSED / UNDEFINED tokens give "". Throws on a bad id.
  std::string_view piece(int32_t id) const;
  TokenType type(int32_t id) const;
  uint32_t attrs(int32_t id) const;
  bool has_attr(int32_t id, uint32_t a) const { return (attrs(id) & a) != 0; }

  std::optional<int32_t> find(std::string_view text) const;
  // The <0xXX> token for a byte, or kNoToken.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }

  const SpecialIds& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  bool is_eog(int32_t id) const { return valid(id) && eog_flags_[id] != 0; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }  // ascending

  // Tokens matched as whole pieces before BPE (CONTROL, USER_DEFINED or UNKNOWN attribute),
  // longest text first, ties by id.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }

  // BPE symbols: every token id is a symbol; strings that occur in merges but are not tokens get
  // ids from n_tokens() up. kNoToken when `s` is neither.
  int32_t symbol(std::string_view s) const;
  int32_t ascii_symbol(uint8_t c) const { return ascii_symbols_[c & 0x7f]; }
  std::optional<Merge> merge(int32_t left, int32_t right) const;
  int n_merges() const { return n_merges_; }
  // Where the merge table came from: "built", "mapped from FILE", or "built, FILE written" (or why
  // not, or why a cache file found was not used).
  const std::string& merge_table_origin() const { return merge_table_origin_; }

  // Characters after which a U+2581 can be merged onto (some merge joins a left part ending in
  // that character to a right part starting with U+2581). The tokenizer never splits a line there.
  bool glues_to_following_space(std::string_view ch) const;

 private:
  // A list of strings read in place: a VocabData's vector, or a GGUF file's array of strings.
  class Strings {
   public:
    explicit Strings(const std::vector<std::string>& v) : vec_(&v) {}
    explicit Strings(const gguf::ValueArray& a) : arr_(&a) {}
    size_t size() const;
    std::string_view operator[](size_t k) const;

   private:
    const std::vector<std::string>* vec_ = nullptr;
    const gguf::ValueArray* arr_ = nullptr;
  };
  // What both constructors do: `data` gives everything but the tokens and merges. `merge_cache` names
  // the merge table's cache file ("": none) and the key it must have been made with.
  struct MergeCacheRef {
    std::string path;
    uint64_t key = 0;
  };
  void build(const VocabData& data, Strings tokens, Strings merges, const MergeCacheRef& merge_cache);
  void derive_attributes();
  void build_pieces();
  // A merge's parts as found among the symbols before any merge is read (build_merges' phase 1).
  struct ResolvedMerge {
    uint32_t pos;   // the space between left and right; 0: the merge can never apply
    int32_t id[3];  // left, right, left + right; kNoToken: not a symbol yet
  };
  // The merge table (empty) and `resolved` (n_merges entries): their memory, touched.
  void allocate_merge_tables(size_t n_merges, LargeVector<ResolvedMerge>& resolved);
  void build_merges(Strings merges, LargeVector<ResolvedMerge>& resolved);
  // The merge table kept on disk (vocab_cache.cpp). map_merge_cache: true once the table, the symbols
  // that merges made and the glue characters are taken from a verified cache file (its mapping kept);
  // false, with *why, leaving everything as it was. write_merge_cache: the built table, best effort.
  bool map_merge_cache(const MergeCacheRef& cache, size_t n_merge_strings, std::string* why);
  bool write_merge_cache(const MergeCacheRef& cache, size_t n_merge_strings, std::string* why) const;
  int32_t intern(std::string_view s, uint64_t hash);  // symbol id of `s`, adding it when new
  static uint64_t symbol_hash(std::string_view s);    // the hash the index keys a symbol's text by
  std::string_view symbol_text(int32_t sym) const {
    return std::string_view(pool_).substr(offsets_[sym], offsets_[sym + 1] - offsets_[sym]);
  }
  void index_insert(int32_t sym, uint64_t hash);  // hash: string_hash of sym's text
  int32_t index_find(std::string_view s) const;
  int32_t index_find(std::string_view s, uint64_t hash) const;  // hash: string_hash(s)
  int32_t token_with_text(std::string_view s) const;            // kNoToken when none

  // Open-addressing table keyed by (left symbol, right symbol).
  struct MergeSlot {
    uint64_t key;
    Merge value;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  std::string source_;
  int32_t n_tokens_ = 0;
  // The large tables live in huge pages (gguf/large_alloc.h): ~40 MB for the real vocabulary.
  // Symbol strings (the tokens, then merge parts that are not tokens) packed in one buffer:
  // symbol i is pool_[offsets_[i], offsets_[i + 1]).
  LargeString pool_;
  LargeVector<uint32_t> offsets_;
  // String -> symbol index: open addressing, a slot holds (hash high bits << 32 | symbol + 1).
  LargeVector<uint64_t> index_;
  uint64_t index_mask_ = 0;
  size_t index_used_ = 0;

  LargeVector<TokenType> types_;
  LargeVector<uint32_t> attrs_;
  LargeString piece_pool_;
  LargeVector<uint32_t> piece_offsets_;
  int32_t ascii_symbols_[128];
  int32_t byte_tokens_[256];
  SpecialIds special_;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = false;
  std::vector<uint8_t> eog_flags_;
  std::vector<int32_t> eog_ids_;
  std::vector<int32_t> special_tokens_;
  LargeVector<MergeSlot> merge_slots_;      // the table when built here
  const MergeSlot* merge_table_ = nullptr;  // the table in use: merge_slots_ or a cache file's mapping
  std::shared_ptr<const void> merge_cache_mapping_;
  std::string merge_table_origin_ = "built";
  uint64_t merge_mask_ = 0;
  int n_merges_ = 0;
  bool ascii_glue_[128] = {};
  std::vector<std::string> glue_chars_;  // non-ASCII characters that glue to a following U+2581
};

}  // namespace gem4::text
