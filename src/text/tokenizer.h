// Gemma 4 tokenizer with llama.cpp's semantics (llama-vocab.cpp, tokenizer model "gemma4"):
//
//  1. Special tokens are cut out first, whole: with parse_special every CONTROL / USER_DEFINED /
//     UNKNOWN token matches; without it USER_DEFINED tokens still match (except <|tool_response>,
//     which the EOG rule made CONTROL) and CONTROL ones are plain text. Longest token first.
//  2. In each remaining text fragment, ' ' becomes U+2581; no prefix space is added. Bytes that
//     are not UTF-8 are decoded the way llama.cpp does (U+FFFD per bad byte, overlong forms kept
//     as their code point).
//  3. Pre-split `[^\n]+|[\n]+`; a newline-only run that is itself a token is emitted whole.
//  4. BPE over UTF-8 characters: the merge with the lowest rank wins, ties go to the leftmost pair.
//     A final symbol that is not a token becomes <0xXX> byte tokens.
//
// Lines are BPE'd in pieces where no merge can cross (before a U+2581 that no merge can attach to
// the previous character), and pieces are cached per call: same ids as whole-line BPE, much faster.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace gem4::text {

class Tokenizer {
 public:
  // Reads the tokenizer.ggml.* keys of `file`. Throws TokenizerError. With a `merge_cache_dir` the
  // BPE merge table is kept there between runs (Vocab, vocab_cache.cpp); the front ends give the
  // folder of the packed-weight cache.
  static Tokenizer from_gguf(const gguf::GgufFile& file, const std::string& merge_cache_dir = "");
  explicit Tokenizer(VocabData data);

  // Text -> ids. add_bos prepends bos() (throws if the vocabulary has none).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The bytes a token stands for: U+2581 -> ' ', <0xXX> -> the byte. With `special`, CONTROL and
  // UNKNOWN tokens are written out (<turn|>); without it they give "" (llama.cpp's special=false).
  // USER_DEFINED tokens are always written out. Throws TokenizerError on an id out of range.
  std::string token_piece(int32_t id, bool special = true) const;
  // Concatenated pieces. Not a cleaned-up detokenization: " ," stays " ,".
  std::string decode(const std::vector<int32_t>& ids, bool special = true) const;

  bool is_eog(int32_t id) const { return vocab_->is_eog(id); }
  const std::vector<int32_t>& eog_ids() const { return vocab_->eog_ids(); }
  int32_t bos() const { return vocab_->special().bos; }  // kNoToken (-1) when absent
  int32_t eos() const { return vocab_->special().eos; }
  int32_t unk() const { return vocab_->special().unk; }
  int32_t pad() const { return vocab_->special().pad; }
  int32_t mask() const { return vocab_->special().mask; }
  // Whether prompts should start with BOS (always true for gemma4, as in llama.cpp).
  bool add_bos_default() const { return vocab_->add_bos(); }

  int n_vocab() const { return vocab_->n_tokens(); }
  std::optional<int32_t> find_token(std::string_view text) const { return vocab_->find(text); }
  std::string_view token_text(int32_t id) const { return vocab_->text(id); }  // raw, with U+2581
  TokenType token_type(int32_t id) const { return vocab_->type(id); }         // as in the file
  uint32_t token_attrs(int32_t id) const { return vocab_->attrs(id); }        // after load rules
  bool is_control(int32_t id) const { return vocab_->has_attr(id, attr::kControl); }
  bool is_user_defined(int32_t id) const { return vocab_->has_attr(id, attr::kUserDefined); }
  bool is_byte(int32_t id) const { return vocab_->has_attr(id, attr::kByte); }
  bool is_unused(int32_t id) const { return vocab_->has_attr(id, attr::kUnused); }
  bool is_normal(int32_t id) const { return vocab_->has_attr(id, attr::kNormal); }

  const Vocab& vocab() const { return *vocab_; }

 private:
  explicit Tokenizer(std::shared_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {}
  std::shared_ptr<const Vocab> vocab_;  // shared: copies of a Tokenizer are cheap and immutable
};

// The text llama.cpp hands to BPE for a raw fragment: ' ' -> U+2581, and every byte sequence
// decoded and re-encoded as llama.cpp's unicode_cpts_from_utf8 does (a byte that starts no valid
// sequence -> U+FFFD; overlong forms -> their code point). Code points above U+10FFFF, where
// llama.cpp throws, become U+FFFD. Exposed for tests.
void append_llama_normalized(std::string& out, std::string_view raw);

}  // namespace gem4::text
