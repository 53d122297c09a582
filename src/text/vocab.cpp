#include "text/vocab.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <span>
#include <system_error>
#include <thread>

#include "gguf/gguf.h"

namespace gem4::text {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, how the vocabulary spells a space

uint32_t attrs_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::Normal:
      return attr::kNormal;
    case TokenType::Unknown:
      return attr::kUnknown;
    case TokenType::Control:
      return attr::kControl;
    case TokenType::UserDefined:
      return attr::kUserDefined;
    case TokenType::Unused:
      return attr::kUnused;
    case TokenType::Byte:
      return attr::kByte;
    default:
      return attr::kUndefined;
  }
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

uint64_t mix64(uint64_t k) {  // splitmix64 finaliser: spreads ids that differ in few bits
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return k;
}

uint64_t string_hash(std::string_view s) { return mix64(std::hash<std::string_view>{}(s)); }

// Length of the UTF-8 character that starts with `lead`, judged from the lead byte alone, as
// llama.cpp's unicode_len_utf8 does (a stray continuation byte counts as a character of its own).
size_t utf8_char_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

std::string_view last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return s.substr(s.size() - 1);
  --i;
  return utf8_char_len(static_cast<uint8_t>(s[i])) == s.size() - i ? s.substr(i) : s.substr(s.size() - 1);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos);
  return out;
}

// The texts llama.cpp uses to recognise special tokens that the converter did not label
// (llama-vocab.cpp, "auto-detect special tokens by text"). Data, not ids.
using TextList = std::span<const std::string_view>;
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    "<\uFF5Cfim\u2581begin\uFF5C>",
    "<PRE>",          "\u2581<PRE>",  "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    "<\uFF5Cfim\u2581hole\uFF5C>",
    "<SUF>",          "\u2581<SUF>",  "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",    "<\uFF5Cfim\u2581end\uFF5C>",
    "<MID>",          "\u2581<MID>",  "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                             "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// Tokens that end generation, recognised by text. <eos>, <turn|> and <|tool_response> are Gemma 4's.
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
                                          "[e~["};
// gpt-oss tokens that llama.cpp always renders (USER_DEFINED).
constexpr std::string_view kAlwaysRenderedTexts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                     "<|constrain|>"};

// --- reading keys ---------------------------------------------------------------------------

[[noreturn]] void key_error(const gguf::GgufFile& file, const std::string& key, const std::string& what) {
  throw TokenizerError(file.path() + ": " + key + ": " + what);
}

const gguf::Value& string_array(const gguf::GgufFile& file, const std::string& key) {
  const gguf::Value* v = file.find(key);
  if (!v) key_error(file, key, "missing (not a tokenizer GGUF?)");
  if (v->type != gguf::ValueType::ARRAY || v->elem_type != gguf::ValueType::STRING)
    key_error(file, key,
              std::string("expected an array of strings, found ") + gguf::value_type_name(v->type));
  return *v;
}

// Every tokenizer.ggml.* key but the tokens and merges, which Vocab reads in place.
VocabData keys_from_gguf(const gguf::GgufFile& file) {
  VocabData d;
  d.source = file.path();
  const std::string model_key = "tokenizer.ggml.model";
  const gguf::Value* model = file.find(model_key);
  if (!model) key_error(file, model_key, "missing (not a tokenizer GGUF?)");
  if (model->type != gguf::ValueType::STRING) key_error(file, model_key, "expected a string");
  d.model = model->s;

  const std::string types_key = "tokenizer.ggml.token_type";
  if (const gguf::Value* t = file.find(types_key)) {
    if (t->type != gguf::ValueType::ARRAY ||
        !(t->elem_type == gguf::ValueType::INT32 || t->elem_type == gguf::ValueType::UINT32))
      key_error(file, types_key, "expected an array of int32");
    d.types.reserve(t->elems.size());
    for (size_t k = 0; k < t->elems.size(); ++k) d.types.push_back(static_cast<int32_t>(t->elems.int_at(k)));
  }

  // Special ids: an id outside the vocabulary is ignored, as llama.cpp does (it warns).
  const int64_t n = static_cast<int64_t>(string_array(file, "tokenizer.ggml.tokens").elems.size());
  auto read_id = [&](const char* key, int32_t& id) {
    const gguf::Value* v = file.find(key);
    if (!v) return;
    if (!v->is_integer()) key_error(file, key, "expected an integer token id");
    const int64_t x = v->as_int();
    if (x >= 0 && x < n) id = static_cast<int32_t>(x);
  };
  SpecialIds& s = d.special;
  read_id("tokenizer.ggml.bos_token_id", s.bos);
  read_id("tokenizer.ggml.eos_token_id", s.eos);
  read_id("tokenizer.ggml.eot_token_id", s.eot);
  read_id("tokenizer.ggml.eom_token_id", s.eom);
  read_id("tokenizer.ggml.unknown_token_id", s.unk);
  read_id("tokenizer.ggml.seperator_token_id", s.sep);  // sic: the key is spelled this way
  read_id("tokenizer.ggml.padding_token_id", s.pad);
  read_id("tokenizer.ggml.mask_token_id", s.mask);
  read_id("tokenizer.ggml.fim_pre_token_id", s.fim_pre);
  read_id("tokenizer.ggml.fim_suf_token_id", s.fim_suf);
  read_id("tokenizer.ggml.fim_mid_token_id", s.fim_mid);
  read_id("tokenizer.ggml.fim_pad_token_id", s.fim_pad);
  read_id("tokenizer.ggml.fim_rep_token_id", s.fim_rep);
  read_id("tokenizer.ggml.fim_sep_token_id", s.fim_sep);
  read_id("tokenizer.ggml.prefix_token_id", s.fim_pre);  // deprecated spellings
  read_id("tokenizer.ggml.suffix_token_id", s.fim_suf);
  read_id("tokenizer.ggml.middle_token_id", s.fim_mid);

  d.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  d.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", false);
  // Gemma 4's tokenizer.json stopped inserting <bos>, so converted files may say false; llama.cpp
  // forces it on for this tokenizer (PR #21500) and so do we.
  d.add_bos = true;
  return d;
}

}  // namespace

// --- Vocab ----------------------------------------------------------------------------------

size_t Vocab::Strings::size() const { return vec_ ? vec_->size() : arr_->size(); }

std::string_view Vocab::Strings::operator[](size_t k) const {
  return vec_ ? std::string_view((*vec_)[k]) : arr_->string_at(k);
}

Vocab::Vocab(VocabData data) { build(data, Strings(data.tokens), Strings(data.merges), MergeCacheRef{}); }

Vocab::Vocab(const gguf::GgufFile& file, const std::string& merge_cache_dir) {
  // Missing or mistyped keys and arrays are reported before the model name is checked, as before.
  const VocabData keys = keys_from_gguf(file);
  const gguf::ValueArray& tokens = string_array(file, "tokenizer.ggml.tokens").elems;
  const gguf::ValueArray& merges = string_array(file, "tokenizer.ggml.merges").elems;
  MergeCacheRef cache;
  if (!merge_cache_dir.empty()) {
    // Named by what the table is made from: every file with the same vocabulary shares one.
    cache.key = mix64(mix64(tokens.strings_hash()) ^ merges.strings_hash());
    char name[48];
    std::snprintf(name, sizeof name, "vocab-%016llx.gem4merges", static_cast<unsigned long long>(cache.key));
    cache.path = merge_cache_dir + "/" + name;
  }
  build(keys, Strings(tokens), Strings(merges), cache);
}

void Vocab::build(const VocabData& data, Strings tokens, Strings merges, const MergeCacheRef& merge_cache) {
  source_ = data.source;
  if (data.model != "gemma4")
    throw TokenizerError(source_ + ": tokenizer.ggml.model is '" + data.model +
                         "'; only the 'gemma4' tokenizer (llama.cpp's converter) is supported");
  const size_t n = tokens.size();
  if (n == 0) throw TokenizerError(source_ + ": tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX / 4)) throw TokenizerError(source_ + ": vocabulary too large");
  if (!data.types.empty() && data.types.size() < n)
    throw TokenizerError(source_ + ": tokenizer.ggml.token_type has " + std::to_string(data.types.size()) +
                         " entries for " + std::to_string(n) + " tokens");
  n_tokens_ = static_cast<int32_t>(n);

  // The merge tables are most of the memory here (24 MiB for the real vocabulary), and on a VM the
  // first touch of fresh memory can cost more than filling it (the host backs each page then, 55-70 ms
  // of a start on an Ice Lake VM): a helper thread takes them while this one builds the string index.
  LargeVector<ResolvedMerge> resolved;
  std::exception_ptr tables_error;
  auto allocate_tables = [&] {
    try {
      allocate_merge_tables(merges.size(), resolved);
    } catch (...) {
      tables_error = std::current_exception();
    }
  };
  std::jthread tables;  // joined below, or on the way out of an error
  // None where a cache file is there to give the table (allocated below if it does not).
  const bool cache_file = !merge_cache.path.empty() && ::access(merge_cache.path.c_str(), R_OK) == 0;
  if (merges.size() >= 4096 && !cache_file) {  // worth a thread (as phase 1 of build_merges)
    try {
      tables = std::jthread(allocate_tables);
    } catch (const std::system_error&) {  // none could be started: this one does it
    }
  }
  if (!tables.joinable() && !cache_file) allocate_tables();

  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += tokens[i].empty() ? 24 : tokens[i].size();
  if (bytes >= UINT32_MAX / 2) throw TokenizerError(source_ + ": tokenizer.ggml.tokens too large");
  pool_.reserve(bytes + bytes / 8);
  offsets_.reserve(n + 1);
  offsets_.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i].empty()) {
      pool_ += "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    } else {
      pool_ += tokens[i];
    }
    offsets_.push_back(static_cast<uint32_t>(pool_.size()));
  }

  size_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  index_.assign(capacity, 0);
  index_mask_ = capacity - 1;
  // Each token's hash is taken kAhead tokens before its lookup and its slot prefetched then: the
  // index (4 MiB for the real vocabulary) is fresh memory beyond L2, and one token after the other
  // every lookup waited on it.
  constexpr int32_t kAhead = 16;
  uint64_t hashes[kAhead];
  auto hash_ahead = [&](int32_t id) {
    const uint64_t h = string_hash(symbol_text(id));
    __builtin_prefetch(&index_[h & index_mask_]);
    hashes[id % kAhead] = h;
  };
  for (int32_t id = 0; id < std::min(kAhead, n_tokens_); ++id) hash_ahead(id);
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const uint64_t h = hashes[id % kAhead];
    if (const int32_t other = index_find(symbol_text(id), h); other != kNoToken)
      throw TokenizerError(source_ + ": tokenizer.ggml.tokens: duplicate token '" +
                           std::string(symbol_text(id)) + "' at ids " + std::to_string(other) + " and " +
                           std::to_string(id));
    index_insert(id, h);
    if (id + kAhead < n_tokens_) hash_ahead(id + kAhead);
  }

  types_.assign(n, TokenType::Normal);
  attrs_.assign(n, attr::kNormal);
  if (!data.types.empty()) {
    for (size_t i = 0; i < n; ++i) {
      types_[i] = static_cast<TokenType>(data.types[i]);
      attrs_[i] = attrs_from_type(data.types[i]);
    }
  }

  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    byte_tokens_[b] = token_with_text(std::string_view(name, 6));
  }

  special_ = data.special;
  for (int32_t* id : {&special_.bos, &special_.eos, &special_.unk, &special_.sep, &special_.pad,
                      &special_.mask, &special_.eot, &special_.eom, &special_.fim_pre, &special_.fim_suf,
                      &special_.fim_mid, &special_.fim_pad, &special_.fim_rep, &special_.fim_sep})
    if (!valid(*id)) *id = kNoToken;
  add_bos_ = data.add_bos;
  add_eos_ = data.add_eos;
  add_space_prefix_ = data.add_space_prefix;

  derive_attributes();

  // Whole-piece matching before BPE: llama.cpp's cache_special_tokens, longest first. llama.cpp's
  // sort is not stable; equal lengths go by id here so the order is reproducible.
  for (int32_t id = 0; id < n_tokens_; ++id)
    if (attrs_[id] & (attr::kControl | attr::kUserDefined | attr::kUnknown)) special_tokens_.push_back(id);
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int32_t a, int32_t b) { return symbol_text(a).size() > symbol_text(b).size(); });

  build_pieces();
  std::string why;
  if (!merge_cache.path.empty() && map_merge_cache(merge_cache, merges.size(), &why)) {
    merge_table_origin_ = "mapped from " + merge_cache.path;
  } else {
    if (tables.joinable()) tables.join();
    if (tables_error) std::rethrow_exception(tables_error);
    if (cache_file) allocate_tables();  // not done above: the cache file was expected to serve
    if (tables_error) std::rethrow_exception(tables_error);
    build_merges(merges, resolved);
    merge_table_ = merge_slots_.data();
    if (!merge_cache.path.empty()) {
      merge_table_origin_ = "built (" + why + ")";
      std::string not_kept;
      merge_table_origin_ += write_merge_cache(merge_cache, merges.size(), &not_kept)
                                 ? ", " + merge_cache.path + " written"
                                 : ", not kept: " + not_kept;
    }
  }
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    ascii_symbols_[c] = index_find(std::string_view(&ch, 1));
  }
}

void Vocab::derive_attributes() {
  // Order and rules follow llama.cpp's llama_vocab::impl::load. llama.cpp walks its hash map; here
  // the lowest id wins when several tokens could fill a slot.
  auto first_of = [&](TextList texts) {
    int32_t best = kNoToken;
    for (std::string_view t : texts) {
      const int32_t id = token_with_text(t);
      if (id != kNoToken && (best == kNoToken || id < best)) best = id;
    }
    return best;
  };
  auto detect = [&](int32_t& slot, TextList texts) {
    if (slot != kNoToken) return;
    slot = first_of(texts);
    if (slot != kNoToken) attrs_[slot] |= attr::kControl;  // "control-looking token ... overridden"
  };
  detect(special_.eot, kEotTexts);
  detect(special_.eom, kEomTexts);
  detect(special_.fim_pre, kFimPreTexts);
  detect(special_.fim_suf, kFimSufTexts);
  detect(special_.fim_mid, kFimMidTexts);
  detect(special_.fim_pad, kFimPadTexts);
  detect(special_.fim_rep, kFimRepTexts);
  detect(special_.fim_sep, kFimSepTexts);

  // Control tokens named "unused" are unused.
  for (int32_t id = 0; id < n_tokens_; ++id)
    if ((attrs_[id] & attr::kControl) && symbol_text(id).find("unused") != std::string_view::npos)
      attrs_[id] |= attr::kUnused;

  eog_flags_.assign(n_tokens_, 0);
  for (int32_t id : {special_.fim_pad, special_.fim_rep, special_.fim_sep})
    if (id != kNoToken) eog_flags_[id] = 1;
  for (std::string_view t : kEogTexts) {
    if (const int32_t id = token_with_text(t); id != kNoToken) {
      eog_flags_[id] = 1;
      attrs_[id] |= attr::kControl;  // e.g. <|tool_response>: USER_DEFINED in the file, now also CONTROL
    }
  }
  for (std::string_view t : kAlwaysRenderedTexts)
    if (const int32_t id = token_with_text(t); id != kNoToken) attrs_[id] = attr::kUserDefined;
  for (int32_t id : {special_.eos, special_.eot, special_.eom})
    if (id != kNoToken) eog_flags_[id] = 1;

  auto eog_with_text = [&](std::initializer_list<std::string_view> texts) {
    for (std::string_view t : texts)
      if (const int32_t id = token_with_text(t); id != kNoToken && eog_flags_[id]) return id;
    return kNoToken;
  };
  // o200k_harmony / solar-open: <|end|> is not an end of generation there.
  {
    const int32_t ret = eog_with_text({"<|return|>"}), call = eog_with_text({"<|call|>", "<|calls|>"});
    const int32_t flush = eog_with_text({"<|flush|>"}), end = eog_with_text({"<|end|>"});
    if (end != kNoToken && call != kNoToken && (ret != kNoToken || flush != kNoToken)) {
      eog_flags_[end] = 0;
      attrs_[end] = attr::kUserDefined;
    }
  }
  // Gemma 4: </s> (id 212 in the real vocabulary) is an ordinary token, not an end of generation.
  {
    const int32_t tool_response = eog_with_text({"<|tool_response>"}), s = eog_with_text({"</s>"});
    if (tool_response != kNoToken && s != kNoToken) {
      eog_flags_[s] = 0;
      attrs_[s] = attr::kNormal;
    }
  }
  for (int32_t id = 0; id < n_tokens_; ++id)
    if (eog_flags_[id]) eog_ids_.push_back(id);
}

void Vocab::build_pieces() {
  piece_pool_.reserve(pool_.size());
  piece_offsets_.reserve(n_tokens_ + 1);
  piece_offsets_.push_back(0);
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const uint32_t a = attrs_[id];
    const std::string_view t = symbol_text(id);
    if (a & (attr::kUnknown | attr::kControl | attr::kUserDefined)) {
      piece_pool_ += t;
    } else if (a & attr::kNormal) {
      piece_pool_ +=
          t.find(kSpaceMarker) == std::string_view::npos ? std::string(t) : replace_all(t, kSpaceMarker, " ");
    } else if (a & attr::kByte) {
      // llama.cpp reads the two characters after "<0x" as hex.
      const std::string hex = t.size() >= 5 ? std::string(t.substr(3, 2)) : std::string();
      piece_pool_.push_back(static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
    }
    piece_offsets_.push_back(static_cast<uint32_t>(piece_pool_.size()));
  }
}

void Vocab::allocate_merge_tables(size_t n_merges, LargeVector<ResolvedMerge>& resolved) {
  size_t capacity = 16;
  while (capacity < n_merges * 2) capacity <<= 1;
  merge_slots_.assign(capacity, MergeSlot{kEmptyKey, Merge{0, 0}});
  merge_mask_ = capacity - 1;
  resolved.resize(n_merges);
}

void Vocab::build_merges(Strings merges, LargeVector<ResolvedMerge>& resolved) {
  // Why two phases and prefetches: the real vocabulary has ~500k merges, and both the string index
  // (~1 M slots) and the merge table (~1 M slots) are far larger than the caches, so each lookup and
  // each insert waits on memory (0.2 s of every start when done one after the other).
  // Phase 1 looks up every merge's left part, right part and left + right among the symbols that
  // exist before any merge is read: read-only, so split between two threads, each hashing kAhead
  // merges before it looks them up and prefetching their index slots then.
  // Phase 2, in rank order on this thread: what phase 1 did not find is interned (so new symbols
  // get their ids in rank order, as a one-pass build gives them), and each pair is inserted kAhead
  // pairs after its table slot was prefetched.
  constexpr size_t kAhead = 16;
  auto resolve = [&](size_t begin, size_t end) {
    struct Split {
      uint32_t pos = 0;
      uint64_t hash[3] = {};
      std::string joined;  // left + right, built once for its hash and kept for its lookup
    };
    auto split = [&](std::string_view m, Split& out) {
      // llama.cpp splits at the first space after position 0, so a merge may start with a space.
      const size_t pos = m.find(' ', 1);
      out.pos = pos == std::string_view::npos || pos + 1 >= m.size() ? 0 : static_cast<uint32_t>(pos);
      if (!out.pos) return;
      out.joined.assign(m.substr(0, pos));
      out.joined.append(m.substr(pos + 1));
      const std::string_view parts[3] = {m.substr(0, pos), m.substr(pos + 1), out.joined};
      for (int k = 0; k < 3; ++k) {
        out.hash[k] = string_hash(parts[k]);
        __builtin_prefetch(&index_[out.hash[k] & index_mask_]);
      }
    };
    Split ring[kAhead];
    for (size_t r = begin; r < std::min(begin + kAhead, end); ++r) split(merges[r], ring[r % kAhead]);
    for (size_t rank = begin; rank < end; ++rank) {
      Split& sp = ring[rank % kAhead];
      ResolvedMerge& out = resolved[rank];
      out.pos = sp.pos;
      if (sp.pos) {
        const std::string_view m = merges[rank];
        out.id[0] = index_find(m.substr(0, sp.pos), sp.hash[0]);
        out.id[1] = index_find(m.substr(sp.pos + 1), sp.hash[1]);
        out.id[2] = index_find(sp.joined, sp.hash[2]);
      }
      if (rank + kAhead < end) split(merges[rank + kAhead], sp);  // the slot is free again
    }
  };
  const size_t half = merges.size() / 2;
  std::thread helper;
  if (half >= 4096) {  // worth a thread; without one (none could be started) this thread does it all
    try {
      helper = std::thread(resolve, half, merges.size());
    } catch (const std::system_error&) {
    }
  }
  resolve(0, helper.joinable() ? half : merges.size());
  if (helper.joinable()) helper.join();

  struct Pending {
    uint64_t key;
    int32_t rank, result;
  };
  Pending pending[kAhead];
  size_t n_pending = 0;  // pairs recorded; the last min(n_pending, kAhead) wait in pending[i % kAhead]
  auto insert = [&](const Pending& p) {
    for (uint64_t i = mix64(p.key) & merge_mask_;; i = (i + 1) & merge_mask_) {
      MergeSlot& slot = merge_slots_[i];
      if (slot.key == p.key) return;  // a repeated pair keeps its first (lowest) rank
      if (slot.key == kEmptyKey) {
        slot = MergeSlot{p.key, Merge{p.rank, p.result}};
        ++n_merges_;
        return;
      }
    }
  };
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const ResolvedMerge& res = resolved[rank];
    if (!res.pos) continue;  // can never apply
    const std::string_view m = merges[rank];
    const std::string_view left = m.substr(0, res.pos), right = m.substr(res.pos + 1);
    auto symbol_of = [&](int k, std::string_view s) {
      return res.id[k] != kNoToken ? res.id[k] : intern(s, string_hash(s));
    };
    const int32_t l = symbol_of(0, left), r = symbol_of(1, right);
    int32_t result = res.id[2];
    if (result == kNoToken) {
      joined.assign(left);
      joined.append(right);
      result = symbol_of(2, joined);
    }
    Pending& p = pending[n_pending++ % kAhead];
    if (n_pending > kAhead) insert(p);  // the oldest, whose slot was prefetched kAhead pairs ago
    p = Pending{pair_key(l, r), static_cast<int32_t>(rank), result};
    __builtin_prefetch(&merge_slots_[mix64(p.key) & merge_mask_], 1);

    // Remember which characters a merge can glue to a following U+2581 (see glues_to_following_space).
    if (right.substr(0, kSpaceMarker.size()) == kSpaceMarker && !left.ends_with(kSpaceMarker)) {
      const std::string_view ch = last_char(left);
      if (ch.size() == 1 && static_cast<uint8_t>(ch[0]) < 128) {
        ascii_glue_[static_cast<uint8_t>(ch[0])] = true;
      } else if (std::find(glue_chars_.begin(), glue_chars_.end(), ch) == glue_chars_.end()) {
        glue_chars_.emplace_back(ch);
      }
    }
  }

  for (size_t k = n_pending > kAhead ? n_pending - kAhead : 0; k < n_pending; ++k)
    insert(pending[k % kAhead]);
}

// --- string index ---------------------------------------------------------------------------

uint64_t Vocab::symbol_hash(std::string_view s) { return string_hash(s); }

int32_t Vocab::index_find(std::string_view s) const { return index_find(s, string_hash(s)); }

int32_t Vocab::index_find(std::string_view s, uint64_t h) const {
  const uint64_t tag = h >> 32;
  for (uint64_t i = h & index_mask_;; i = (i + 1) & index_mask_) {
    const uint64_t slot = index_[i];
    if (slot == 0) return kNoToken;
    if ((slot >> 32) == tag) {
      const int32_t sym = static_cast<int32_t>((slot & 0xFFFFFFFFu) - 1);
      if (symbol_text(sym) == s) return sym;
    }
  }
}

void Vocab::index_insert(int32_t sym, uint64_t h) {
  if (2 * (index_used_ + 1) > index_.size()) {  // keep the load factor under 1/2
    LargeVector<uint64_t> old;
    old.swap(index_);
    index_.assign(old.size() * 2, 0);
    index_mask_ = index_.size() - 1;
    for (uint64_t slot : old) {
      if (slot == 0) continue;
      const uint64_t old_h = string_hash(symbol_text(static_cast<int32_t>((slot & 0xFFFFFFFFu) - 1)));
      uint64_t i = old_h & index_mask_;
      while (index_[i] != 0) i = (i + 1) & index_mask_;
      index_[i] = slot;
    }
  }
  uint64_t i = h & index_mask_;
  while (index_[i] != 0) i = (i + 1) & index_mask_;
  index_[i] = ((h >> 32) << 32) | (static_cast<uint64_t>(sym) + 1);
  ++index_used_;
}

int32_t Vocab::intern(std::string_view s, uint64_t h) {
  const int32_t found = index_find(s, h);
  if (found != kNoToken) return found;
  if (pool_.size() + s.size() >= UINT32_MAX / 2)
    throw TokenizerError(source_ + ": tokenizer.ggml.merges too large");
  const int32_t sym = static_cast<int32_t>(offsets_.size() - 1);
  pool_ += s;
  offsets_.push_back(static_cast<uint32_t>(pool_.size()));
  index_insert(sym, h);
  return sym;
}

int32_t Vocab::token_with_text(std::string_view s) const {
  const int32_t sym = index_find(s);
  return sym < n_tokens_ ? sym : kNoToken;
}

// --- accessors ------------------------------------------------------------------------------

std::string_view Vocab::text(int32_t id) const {
  if (!valid(id)) throw TokenizerError(source_ + ": token id " + std::to_string(id) + " out of range");
  return symbol_text(id);
}

std::string_view Vocab::piece(int32_t id) const {
  if (!valid(id)) throw TokenizerError(source_ + ": token id " + std::to_string(id) + " out of range");
  return std::string_view(piece_pool_)
      .substr(piece_offsets_[id], piece_offsets_[id + 1] - piece_offsets_[id]);
}

TokenType Vocab::type(int32_t id) const {
  if (!valid(id)) throw TokenizerError(source_ + ": token id " + std::to_string(id) + " out of range");
  return types_[id];
}

uint32_t Vocab::attrs(int32_t id) const {
  if (!valid(id)) throw TokenizerError(source_ + ": token id " + std::to_string(id) + " out of range");
  return attrs_[id];
}

std::optional<int32_t> Vocab::find(std::string_view text) const {
  const int32_t id = token_with_text(text);
  if (id == kNoToken) return std::nullopt;
  return id;
}

int32_t Vocab::symbol(std::string_view s) const { return index_find(s); }

std::optional<Merge> Vocab::merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return std::nullopt;
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix64(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merge_table_[i];
    if (slot.key == key) return slot.value;
    if (slot.key == kEmptyKey) return std::nullopt;
  }
}

bool Vocab::glues_to_following_space(std::string_view ch) const {
  if (ch.size() == 1 && static_cast<uint8_t>(ch[0]) < 128) return ascii_glue_[static_cast<uint8_t>(ch[0])];
  return std::find(glue_chars_.begin(), glue_chars_.end(), ch) != glue_chars_.end();
}

}  // namespace gem4::text
